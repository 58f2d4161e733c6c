import type { AttestationResult } from "../attestation.ts";

/** When a result was verified and from when it must not be used: every test says both. */
type Validity = Pick<AttestationResult, "verified_at" | "expires_at">;

/**
 * A passed attestation of the tier-3 node `tee-a` at `https://tee-a.example:8443`, approved
 * for model `m`, with no quote, checks or pinned TLS key recorded. The validity window has no
 * default, so that no test gets a result that is expired (or never expires) by accident.
 */
export function attestationResult(
  fields: Validity & Partial<AttestationResult>,
): AttestationResult {
  return {
    type: "attestation.result.v1",
    node_id: "tee-a",
    tier: 3,
    ok: true,
    reason_code: null,
    reason: null,
    measurement: null,
    approved_models: ["m"],
    tcb_status: "UpToDate",
    advisory_ids: [],
    pck_serial: null,
    fmspc: null,
    quote_b64: null,
    nonce_hex: null,
    checks: [],
    revocation: null,
    session_public_key: null,
    endpoint: "https://tee-a.example:8443",
    tls_key_sha256: null,
    ...fields,
  };
}
