// Independent verification of a tier 3–4 node, as the dispatcher checks it: the TDX quote
// (PCK chain to a trust anchor, signatures, measurement) and its channel binding (REPORTDATA
// = the caller's nonce, the node's TLS key and a tier-4 session key, per `reportDataFor` of
// `@zml/tdx`).
import { X509Certificate } from "node:crypto";
import { connect } from "node:tls";
import { INTEL_SGX_ROOT_CA_PEM, reportDataFor, spkiSha256, verifyQuote } from "@zml/tdx";

// The public types are declared here rather than imported, so the published declarations
// need no other package (`test/types.test.ts` holds them equal to `@zml/tdx`'s and
// `@zml/contracts`' own); `@zml/tdx`'s code is bundled into the built SDK.

/** One verification check: its name, whether it passed, and why. */
export interface AttestationCheck {
  name: string;
  ok: boolean;
  detail: string;
}

/** Intel PCS collateral for a quote (dcap-qvl's QuoteCollateralV3 fields). */
export interface Collateral {
  pck_crl_issuer_chain: string;
  root_ca_crl: string;
  pck_crl: string;
  tcb_info_issuer_chain: string;
  tcb_info: string;
  tcb_info_signature: string;
  qe_identity_issuer_chain: string;
  qe_identity: string;
  qe_identity_signature: string;
}

/** TD measurement fields an approved set may pin. */
export type MeasurementField =
  | "mrtd"
  | "rtmr0"
  | "rtmr1"
  | "rtmr2"
  | "rtmr3"
  | "mrconfigid"
  | "mrowner"
  | "mrownerconfig"
  | "mrseam"
  | "xfam"
  | "td_attributes";

/** Approved TD measurements (hex, any case): `mrtd`, optionally more fields. */
export type MeasurementSet = { id?: string; mrtd: string } & Partial<
  Record<Exclude<MeasurementField, "mrtd">, string>
>;

/** `GET /v1/attestation/{node_id}`: the parts verification needs. */
export interface NodeAttestation {
  node_id: string;
  tier: number;
  quote_b64: string | null;
  nonce_hex: string | null;
  tls_key_sha256: string | null;
}

export interface VerifyAttestationOptions {
  /** The nonce you sent (`?nonce=`): proves the quote is fresh. Required. */
  nonce: string;
  /**
   * The TLS key hash you saw yourself when connecting to the node (see
   * {@link fetchTlsKeySha256}); when given, it must equal the attested one.
   */
  observedTlsKeySha256?: string;
  /**
   * A tier-4 session's public key (base64 SPKI DER, its `session_public_key`): REPORTDATA must
   * bind it too, so the key you seal to is one the attested TD made.
   */
  sessionPublicKey?: string;
  /** Trust anchor, default Intel's SGX root CA. */
  trustedRootPem?: string;
  collateral?: Collateral;
  approvedMeasurements?: MeasurementSet[];
  at?: Date;
}

export interface AttestationCheckResult {
  ok: boolean;
  /** The first failed check as `name: detail`, or null. */
  reason: string | null;
  /** The quote's checks, then `nonce` and `tls_key` (when observed). */
  checks: AttestationCheck[];
  /** The TLS key hash the quote binds (what dispatchers pin). */
  tlsKeySha256: string | null;
}

/**
 * Checks a node's attestation on your side: the answer is for your `nonce`, the quote
 * verifies against the trust anchor (and `approvedMeasurements`, `collateral` when given),
 * and its REPORTDATA binds your nonce and the TLS key hash the gateway reports — which,
 * with `observedTlsKeySha256`, must also be the key the node showed you. Never throws for
 * bad data: every problem is a failed check.
 */
export function verifyNodeAttestation(
  attestation: NodeAttestation,
  options: VerifyAttestationOptions,
): AttestationCheckResult {
  const extra: AttestationCheck[] = [];
  const nonceOk = attestation.nonce_hex?.toLowerCase() === options.nonce.toLowerCase();
  extra.push({
    name: "nonce",
    ok: nonceOk,
    detail: nonceOk ? "the answer is for this nonce" : "the answer is for another nonce",
  });
  const tlsKey = attestation.tls_key_sha256;
  if (options.observedTlsKeySha256 !== undefined) {
    const same = tlsKey !== null && tlsKey === options.observedTlsKeySha256.toLowerCase();
    extra.push({
      name: "tls_key",
      ok: same,
      detail: same ? "the node presented the attested key" : "the node presented another key",
    });
  }
  if (
    attestation.quote_b64 === null ||
    tlsKey === null ||
    !/^[0-9a-fA-F]{64}$/.test(options.nonce)
  ) {
    const detail =
      attestation.quote_b64 === null
        ? "no quote"
        : tlsKey === null
          ? "the attestation binds no TLS key"
          : "nonce must be 32 bytes of hex";
    const checks = [...extra, { name: "report_data", ok: false, detail }];
    return { ok: false, reason: `report_data: ${detail}`, checks, tlsKeySha256: tlsKey };
  }
  const verification = verifyQuote({
    quote: attestation.quote_b64,
    collateral: options.collateral,
    at: options.at ?? new Date(),
    trustedRootPem: options.trustedRootPem ?? INTEL_SGX_ROOT_CA_PEM,
    policy: {
      expectedReportData: reportDataFor({
        nonce: options.nonce,
        tlsKeySha256: tlsKey,
        sessionKeySha256:
          options.sessionPublicKey === undefined
            ? undefined
            : spkiSha256(Buffer.from(options.sessionPublicKey, "base64")),
      }),
      ...(options.approvedMeasurements
        ? { approvedMeasurements: options.approvedMeasurements }
        : {}),
    },
  });
  const checks = [...verification.checks, ...extra];
  const failed = checks.find((c) => !c.ok);
  return {
    ok: failed === undefined,
    reason: failed ? `${failed.name}: ${failed.detail}` : null,
    checks,
    tlsKeySha256: tlsKey,
  };
}

/**
 * Connects to a node's `https://` endpoint and returns the SHA-256 of the SPKI DER of the
 * key its certificate carries (the certificate need not chain to a CA: the quote vouches
 * for the key). Sends nothing.
 */
export function fetchTlsKeySha256(endpoint: string, timeoutMs = 5_000): Promise<string> {
  const url = new URL(endpoint);
  if (url.protocol !== "https:") return Promise.reject(new TypeError("endpoint must be https://"));
  return new Promise((resolve, reject) => {
    const socket = connect({
      host: url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(url.port || 443),
      rejectUnauthorized: false,
      ...(/^[\d.]+$|:/.test(url.hostname) ? {} : { servername: url.hostname }),
    });
    socket.setTimeout(timeoutMs, () =>
      socket.destroy(new Error(`no TLS handshake within ${timeoutMs} ms`)),
    );
    socket.once("secureConnect", () => {
      try {
        resolve(spkiSha256(new X509Certificate(socket.getPeerCertificate(false).raw).publicKey));
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      } finally {
        socket.destroy();
      }
    });
    socket.once("error", reject);
  });
}
