// ZML's REPORTDATA layout: what a tier 3/4 node's quote must bind, so that an attestation
// vouches for the channel the payload travels on and not only for "some TD somewhere".
import { createHash, createPublicKey, X509Certificate } from "node:crypto";
import type { KeyObject } from "node:crypto";

/** Domain separator of the key binding, so the hash cannot be mistaken for another protocol's. */
export const REPORT_DATA_DOMAIN = "zml.tdx.report-data.v1";

const HEX32 = /^[0-9a-fA-F]{64}$/;
const ZERO32 = "00".repeat(32);

/** What REPORTDATA binds. All values are 32 bytes of hex. */
export interface ReportDataBinding {
  /** The verifier's fresh nonce. */
  nonce: string;
  /** SHA-256 of the DER SubjectPublicKeyInfo of the node's TLS key. */
  tlsKeySha256: string;
  /** SHA-256 of the SPKI DER of a tier-4 session key; omitted (or null) without a session. */
  sessionKeySha256?: string | null | undefined;
}

/**
 * The 64 REPORTDATA bytes (128 lowercase hex) for a binding:
 *
 *     REPORTDATA[0..32)  = nonce
 *     REPORTDATA[32..64) = SHA-256(REPORT_DATA_DOMAIN ‖ 0x00 ‖ tls_spki_sha256 ‖ session_spki_sha256)
 *
 * with `session_spki_sha256` = 32 zero bytes when there is no session key. The nonce stays
 * readable as is; the key half needs both key hashes to recompute.
 *
 * @throws TypeError when a value is not 32 bytes of hex.
 */
export function reportDataFor(binding: ReportDataBinding): string {
  const session = binding.sessionKeySha256 ?? ZERO32;
  for (const [field, value] of [
    ["nonce", binding.nonce],
    ["tlsKeySha256", binding.tlsKeySha256],
    ["sessionKeySha256", session],
  ] as const) {
    if (!HEX32.test(value)) throw new TypeError(`${field} must be 32 bytes of hex`);
  }
  const keys = createHash("sha256")
    .update(REPORT_DATA_DOMAIN)
    .update(Buffer.of(0))
    .update(Buffer.from(binding.tlsKeySha256, "hex"))
    .update(Buffer.from(session, "hex"))
    .digest("hex");
  return binding.nonce.toLowerCase() + keys;
}

/** SHA-256 (lowercase hex) of a public key's DER SubjectPublicKeyInfo. */
export function spkiSha256(key: KeyObject | Uint8Array): string {
  const publicKey = key instanceof Uint8Array || key.type === "public" ? key : createPublicKey(key);
  const der =
    publicKey instanceof Uint8Array ? publicKey : publicKey.export({ type: "spki", format: "der" });
  return createHash("sha256").update(der).digest("hex");
}

/** {@link spkiSha256} of the key in a certificate (DER bytes or PEM text). */
export function certificateKeySha256(cert: Uint8Array | string): string {
  return spkiSha256(new X509Certificate(cert).publicKey);
}
