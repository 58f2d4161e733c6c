// The attestation decision: a pure function of the node, its quote, the approved
// measurements, the revocation list, the trust policy and the time. No I/O.
import { createPublicKey } from "node:crypto";
import { ATTESTATION_FAILURES, findRevocation } from "@zml/contracts";
import type {
  ApprovedMeasurement,
  AttestationResult,
  NodeQuoteResponse,
  Revocation,
  TdMeasurement,
  TeeTier,
} from "@zml/contracts";
import { MEASUREMENT_FIELDS, reportDataFor, spkiSha256, verifyQuote } from "@zml/tdx";
import type {
  Collateral,
  MeasurementField,
  MeasurementSet,
  QuoteFields,
  TcbStatus,
} from "@zml/tdx";

/** A tier 3/4 node as the attestation service sees it. */
export interface TeeNode {
  id: string;
  tier: TeeTier;
  endpoint: string;
  models: readonly string[];
}

/** How quotes are judged; fixed at start from the configuration. */
export interface TrustPolicy {
  trustedRootPem: string;
  requireCollateral: boolean;
  acceptableTcbStatuses: readonly TcbStatus[];
  /** Operator-supplied collateral; when set it replaces what nodes serve. */
  collateral?: Collateral;
  ttlMs: number;
}

export interface EvaluateInput {
  node: TeeNode;
  quote: NodeQuoteResponse;
  /** SHA-256 of the TLS key the node presented on the connection that served the quote. */
  tlsKeySha256: string;
  nonceHex: string;
  /** The node was asked for a session key: it must serve one and bind it into REPORTDATA. */
  sessionKey?: boolean;
  approved: Iterable<ApprovedMeasurement>;
  revocations: Iterable<Revocation>;
  policy: TrustPolicy;
  /** Epoch ms. */
  now: number;
}

/** A result with nothing verified: the node failed before or outside quote verification. */
export function failedResult(
  node: Pick<TeeNode, "id" | "tier" | "endpoint">,
  now: number,
  reasonCode: string,
  reason: string,
  nonceHex: string | null = null,
): AttestationResult {
  return {
    type: "attestation.result.v1",
    node_id: node.id,
    tier: node.tier,
    ok: false,
    reason_code: reasonCode,
    reason,
    measurement: null,
    approved_models: [],
    tcb_status: null,
    advisory_ids: [],
    pck_serial: null,
    fmspc: null,
    verified_at: now,
    expires_at: now,
    quote_b64: null,
    nonce_hex: nonceHex,
    checks: [],
    revocation: null,
    session_public_key: null,
    endpoint: node.endpoint,
    tls_key_sha256: null,
  };
}

/**
 * The REPORTDATA binding of a session key: SHA-256 (hex) of its SPKI DER bytes, given as
 * canonical base64. Undefined when the value is not an X25519 public key in that form.
 */
export function sessionKeyBinding(publicKeyB64: string): string | undefined {
  const der = Buffer.from(publicKeyB64, "base64");
  // Node's base64 decoder skips what it cannot read; only a canonical encoding is accepted.
  if (der.length === 0 || der.toString("base64") !== publicKeyB64) return undefined;
  try {
    const key = createPublicKey({ key: der, format: "der", type: "spki" });
    if (key.asymmetricKeyType !== "x25519") return undefined;
  } catch {
    return undefined;
  }
  return spkiSha256(der);
}

/** The result marked revoked by `revocation`; unusable from `now` on. */
export function revokedResult(
  result: AttestationResult,
  revocation: Revocation,
  now: number,
): AttestationResult {
  return {
    ...result,
    ok: false,
    reason_code: ATTESTATION_FAILURES.revoked,
    reason: `revoked (${revocation.id}): ${revocation.reason}`,
    expires_at: Math.min(result.expires_at, now),
    revocation: { id: revocation.id, reason: revocation.reason },
  };
}

/** The measurement sets approved for `model` at `tier`, in `@zml/tdx` form. */
function setsFor(
  approved: readonly ApprovedMeasurement[],
  model: string,
  tier: TeeTier,
): MeasurementSet[] {
  return approved
    .filter((a) => a.model === model && a.tier === tier)
    .map((a) => {
      const set: Record<string, string> = { id: `${model}/${a.id}` };
      for (const field of Object.keys(MEASUREMENT_FIELDS) as MeasurementField[]) {
        const value = a[field];
        if (value !== undefined) set[field] = value;
      }
      return set as MeasurementSet;
    });
}

function matches(fields: QuoteFields, set: MeasurementSet): boolean {
  return (Object.keys(MEASUREMENT_FIELDS) as MeasurementField[]).every((field) => {
    const want = set[field];
    return want === undefined || want.toLowerCase() === fields[field];
  });
}

function measurementOf(fields: QuoteFields): TdMeasurement {
  const { mrtd, rtmr0, rtmr1, rtmr2, rtmr3 } = fields;
  return { mrtd, rtmr0, rtmr1, rtmr2, rtmr3 };
}

/**
 * Verifies a node's quote: chain to the pinned root, signatures, collateral (TCB status,
 * CRLs), not a debug TD, REPORTDATA = `reportDataFor` the nonce, the TLS key the node
 * presented and the session key when one was asked for (so a relay that forwards another
 * TD's quote fails `report_data`), measurement approved for at least one of
 * the node's models at its tier, and no matching revocation. A passed result expires at
 * min(now + TTL, the earliest certificate or collateral expiry). Never throws: a verifier
 * error is an `internal_error` result (fail closed).
 */
export function evaluateQuote(input: EvaluateInput): AttestationResult {
  const { node, policy, now, nonceHex } = input;
  const sessionKey = input.sessionKey === true ? input.quote.session_public_key : undefined;
  const binding = sessionKey === undefined ? undefined : sessionKeyBinding(sessionKey);
  if (input.sessionKey === true && binding === undefined) {
    const why =
      sessionKey === undefined
        ? "asked for a session key, the node served none"
        : "session_public_key is not an X25519 public key (canonical base64 of SPKI DER)";
    return failedResult(node, now, ATTESTATION_FAILURES.sessionKey, why, nonceHex);
  }
  const approved = [...input.approved];
  const byModel = new Map(node.models.map((m) => [m, setsFor(approved, m, node.tier)]));
  let verification;
  try {
    verification = verifyQuote({
      quote: input.quote.quote_b64,
      collateral:
        policy.collateral ?? (input.quote.collateral as Collateral | null | undefined) ?? undefined,
      at: new Date(now),
      trustedRootPem: policy.trustedRootPem,
      policy: {
        acceptableTcbStatuses: policy.acceptableTcbStatuses,
        allowDebug: false,
        approvedMeasurements: [...byModel.values()].flat(),
        expectedReportData: reportDataFor({
          nonce: nonceHex,
          tlsKeySha256: input.tlsKeySha256,
          sessionKeySha256: binding,
        }),
        requireCollateral: policy.requireCollateral,
      },
    });
  } catch (error) {
    return failedResult(node, now, ATTESTATION_FAILURES.internalError, String(error), nonceHex);
  }
  const fields = verification.fields;
  const failed = verification.checks.find((c) => !c.ok);
  const expiry = verification.expiresAt?.getTime() ?? now;
  const result: AttestationResult = {
    type: "attestation.result.v1",
    node_id: node.id,
    tier: node.tier,
    ok: verification.ok,
    reason_code: failed?.name ?? null,
    reason: verification.reason,
    measurement: fields ? measurementOf(fields) : null,
    // Only a verified quote's measurement approves anything.
    approved_models:
      fields && verification.ok
        ? node.models.filter((m) => (byModel.get(m) ?? []).some((set) => matches(fields, set)))
        : [],
    tcb_status: verification.tcbStatus,
    advisory_ids: verification.advisoryIds,
    pck_serial: verification.pckSerial?.toLowerCase() ?? null,
    fmspc: verification.fmspc?.toLowerCase() ?? null,
    verified_at: now,
    expires_at: verification.ok ? Math.min(now + policy.ttlMs, expiry) : now,
    quote_b64: input.quote.quote_b64,
    nonce_hex: nonceHex,
    checks: verification.checks.map(({ name, ok, detail }) => ({ name, ok, detail })),
    revocation: null,
    session_public_key: sessionKey ?? null,
    endpoint: node.endpoint,
    // Only a verified binding makes the key one to pin.
    tls_key_sha256: verification.ok ? input.tlsKeySha256 : null,
  };
  const revocation = findRevocation(input.revocations, result);
  return revocation ? revokedResult(result, revocation, now) : result;
}
