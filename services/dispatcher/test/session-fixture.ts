import type { SessionAttestation } from "@zml/contracts";

/** A session's attestation as a dispatcher records it when it opens the session. */
export function sessionAttestation(
  verifiedAt: number,
  tlsKeySha256: string | null = null,
): SessionAttestation {
  return {
    tls_key_sha256: tlsKeySha256,
    quote_b64: "AAAA",
    nonce_hex: "11".repeat(32),
    session_public_key: "BBBB",
    measurement: {
      mrtd: "a1".repeat(48),
      rtmr0: "00".repeat(48),
      rtmr1: "00".repeat(48),
      rtmr2: "00".repeat(48),
      rtmr3: "00".repeat(48),
    },
    tcb_status: "UpToDate",
    verified_at: verifiedAt,
  };
}
