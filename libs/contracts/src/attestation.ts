import { z } from "zod";
import type { Revocation } from "./admin.ts";
import { InvalidSubjectTokenError, NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Trust tiers 3–4: what the attestation service publishes and what the dispatchers and
 * intake read. The service verifies TDX quotes fetched from the nodes against the approved
 * measurements (`KV_BUCKETS.measurements`) and the revocation list (`KV_BUCKETS.revocations`,
 * both in `admin.ts`); consumers decide from memory only with {@link attestationVerdict}.
 */

/** Prefix of per-node attestation result broadcasts (`zml.attestation.result.<node>`). */
export const ATTESTATION_RESULT_PREFIX = "zml.attestation.result";
/** Wildcard for every node's attestation results. */
export const ATTESTATION_RESULT_ALL = `${ATTESTATION_RESULT_PREFIX}.*`;
/** Queue group of the attestation service replicas on `zml.attestation.verify`. */
export const ATTESTATION_QUEUE_GROUP = "zml-attestation";
/**
 * KV bucket: node id → the node's latest {@link AttestationResult}. Written by the
 * attestation service only; watched into memory by dispatchers so that one that starts late
 * has the whole table at once.
 */
export const ATTESTATION_RESULTS_BUCKET = "zml_attestations";

/** `zml.attestation.result.<node>`; throws {@link InvalidSubjectTokenError} on a bad node id. */
export function attestationResultSubject(nodeId: string): string {
  if (!NODE_ID_PATTERN.test(nodeId)) throw new InvalidSubjectTokenError(nodeId);
  return `${ATTESTATION_RESULT_PREFIX}.${nodeId}`;
}

/**
 * Path the attestation service fetches a quote from, on the node's `endpoint` (always
 * `https://`: the quote binds the TLS key the node presents on that very connection):
 * `?nonce=<64 hex>`, plus `&session_key=1` to have the node generate a fresh ephemeral
 * session key and bind it into the quote (tier-4 sessions, see {@link NodeQuoteResponseSchema}).
 * REPORTDATA layout: `reportDataFor` of `@zml/tdx` (nonce ‖ SHA-256 of the domain, the TLS
 * key hash and the session key hash).
 */
export const NODE_QUOTE_PATH = "/attestation/quote";
/**
 * `DELETE <endpoint>/attestation/session-keys/<key_id>`: the session ended; the TD drops its
 * private key (a TD also drops it by itself when the session's `ttl_s` given with the quote
 * request has passed).
 */
export const NODE_SESSION_KEYS_PATH = "/attestation/session-keys";
/** Nonce length in bytes; it travels as lowercase hex. */
export const ATTESTATION_NONCE_BYTES = 32;

const Hex48 = z
  .string()
  .regex(/^[0-9a-fA-F]{96}$/, "48 bytes of hex")
  .transform((s) => s.toLowerCase());

/** A 32-byte nonce as lowercase hex. */
export const NonceHexSchema = z.string().regex(/^[0-9a-f]{64}$/, "32 bytes of lowercase hex");

/** What a node answers with 200 on `GET <endpoint>/attestation/quote?nonce=<hex>`. */
export const NodeQuoteResponseSchema = z.object({
  /** The raw TDX quote (v4 or v5), base64. */
  quote_b64: z.string().min(1).max(200_000),
  /**
   * Intel collateral in the dcap-qvl JSON form, when the node serves it (dev, tests, and
   * deployments that ship collateral with the quote). Intel signs it, so a node cannot
   * forge it; it can only serve an older copy that is still within its validity.
   */
  collateral: z.record(z.string(), z.string()).nullish(),
  /**
   * Only when asked with `session_key=1`: a fresh ephemeral X25519 public key, base64 of its
   * SPKI DER (44 bytes), whose SHA-256 REPORTDATA binds beside the TLS key (`reportDataFor`
   * of `@zml/tdx`). The private key never leaves the TD.
   */
  session_public_key: z.string().min(1).max(1024).optional(),
});
export type NodeQuoteResponse = z.infer<typeof NodeQuoteResponseSchema>;

/** Tiers that require attestation. */
export const TeeTierSchema = z.union([z.literal(3), z.literal(4)]);
export type TeeTier = z.infer<typeof TeeTierSchema>;

/** True for the tiers whose nodes must be attested before any payload. */
export function isTeeTier(tier: number): tier is TeeTier {
  return tier === 3 || tier === 4;
}

/** The code measurement of an attested TD (lowercase hex). */
export const TdMeasurementSchema = z.object({
  mrtd: Hex48,
  rtmr0: Hex48,
  rtmr1: Hex48,
  rtmr2: Hex48,
  rtmr3: Hex48,
});
export type TdMeasurement = z.output<typeof TdMeasurementSchema>;

/** One verification step, as `@zml/tdx` reports it. */
export const AttestationCheckSchema = z.object({
  name: z.string(),
  ok: z.boolean(),
  detail: z.string(),
});
export type AttestationCheck = z.infer<typeof AttestationCheckSchema>;

/**
 * Failure codes of the attestation service itself. Any other `reason_code` is the name of
 * the `@zml/tdx` check that failed first, e.g. `measurements` (no approved set matches),
 * `td_debug` (a debug TD), `report_data` (the nonce did not come back: a replayed quote),
 * `pck_chain`, `quote_signature`, `tcb_status`, `collateral_required`.
 */
export const ATTESTATION_FAILURES = {
  /** The node did not serve a quote (unreachable, timeout, bad HTTP answer). */
  quoteUnavailable: "quote_unavailable",
  /** An entry of the revocation list matches the node's attestation. */
  revoked: "revoked",
  /** The service could not verify (a bug or bad configuration); fail closed. */
  internalError: "internal_error",
  /**
   * Asked for a session key, the node served none, or one that is not an X25519 public key
   * in SPKI DER form.
   */
  sessionKey: "session_key",
  /** A tier 3/4 endpoint that is not `https://`: there is no channel to bind. */
  tlsRequired: "tls_required",
} as const;

/**
 * The outcome of one attestation of a tier 3/4 node: KV value in `zml_attestations` (key:
 * node id) and payload of `zml.attestation.result.<node>`. Valid only for (node id,
 * `endpoint`, `tls_key_sha256`, `measurement`): a node with another endpoint, TLS key or
 * measurement is not covered by it. Never trust it past `expires_at`, and check revocations
 * and the endpoint too: use {@link attestationVerdict}.
 */
export const AttestationResultSchema = z.object({
  type: z.literal("attestation.result.v1"),
  node_id: z.string().regex(NODE_ID_PATTERN),
  tier: TeeTierSchema,
  ok: z.boolean(),
  /** Null when ok; else a {@link ATTESTATION_FAILURES} value or the failed check's name. */
  reason_code: z.string().nullable(),
  /** Human-readable detail of the failure; null when ok. */
  reason: z.string().nullable(),
  /** Null when no quote was obtained or it did not parse. */
  measurement: TdMeasurementSchema.nullable(),
  /** Models of the node for which an approved measurement (at its tier) matches. */
  approved_models: z.array(z.string()),
  /** Merged TCB status from the collateral; null without collateral. */
  tcb_status: z.string().nullable(),
  /** Intel security advisories of the platform's TCB level. */
  advisory_ids: z.array(z.string()),
  /** PCK certificate serial, lowercase hex. */
  pck_serial: z.string().nullable(),
  /** Platform FMSPC, lowercase hex. */
  fmspc: z.string().nullable(),
  /** Epoch ms. */
  verified_at: z.number().int(),
  /**
   * Epoch ms from which the result must not be used: min(verified_at + TTL, earliest
   * certificate notAfter / CRL and collateral nextUpdate). Equals `verified_at` when not ok.
   */
  expires_at: z.number().int(),
  /** The raw quote, for independent verification with Intel DCAP tooling. */
  quote_b64: z.string().nullable(),
  /** The nonce sent to the node; REPORTDATA must be {@link expectedReportData} of it. */
  nonce_hex: z.string().nullable(),
  checks: z.array(AttestationCheckSchema),
  /** The revocation-list entry that matched, when `reason_code` is `revoked`. */
  revocation: z.object({ id: z.string(), reason: z.string() }).nullable(),
  /**
   * The node's ephemeral session public key (base64 SPKI DER, X25519) that REPORTDATA binds,
   * in results of `session_key` verify requests only (never cached); null otherwise. Results
   * written before this field existed parse with null.
   */
  session_public_key: z.string().nullable().default(null),
  /**
   * The endpoint the quote was fetched from: the result holds for this endpoint only. Null
   * in results written before channel binding (never usable).
   */
  endpoint: z.string().nullable().default(null),
  /**
   * SHA-256 (lowercase hex) of the SPKI DER of the TLS key the node presented on the quote
   * connection, which REPORTDATA binds; dispatchers pin it on every connection. Null when no
   * TLS connection was made (never usable).
   */
  tls_key_sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .nullable()
    .default(null),
});
export type AttestationResult = z.output<typeof AttestationResultSchema>;

/**
 * Request on `zml.attestation.verify`. Without `nonce` the service answers from its cache
 * while the cached result is usable, else attests now. `fresh: true` forces a new
 * attestation with a service nonce (cached and published). With `nonce` the node is attested
 * with the caller's nonce and the result is only returned, never cached or published (the
 * caller vouches for that nonce's freshness, e.g. a client verifying independently).
 * `session_key: true` (only with `nonce`) also asks the node for a fresh ephemeral session
 * key bound into REPORTDATA; the result carries it in `session_public_key`, and a node that
 * serves none fails with `session_key`.
 */
export const AttestationVerifyRequestSchema = z
  .strictObject({
    type: z.literal("attestation.verify.v1"),
    node_id: z.string().regex(NODE_ID_PATTERN),
    nonce: NonceHexSchema.optional(),
    fresh: z.boolean().optional(),
    session_key: z.boolean().optional(),
    /** With `session_key`: how long the TD keeps the key (the session's life and a grace), s. */
    session_ttl_s: z
      .number()
      .int()
      .min(1)
      .max(86_400 + 60)
      .optional(),
  })
  .refine((r) => r.session_key !== true || r.nonce !== undefined, {
    message: "session_key needs a nonce",
    path: ["session_key"],
  });
export type AttestationVerifyRequest = z.input<typeof AttestationVerifyRequestSchema>;

export const ATTESTATION_VERIFY_ERRORS = [
  "invalid_request",
  "unknown_node",
  "not_tee_node",
  "not_ready",
] as const;

/** Reply on `zml.attestation.verify`: a result (which may be `ok: false`) or an error. */
export const AttestationVerifyReplySchema = z.union([
  z.object({ type: z.literal("attestation.verify.reply.v1"), result: AttestationResultSchema }),
  z.object({
    type: z.literal("attestation.verify.reply.v1"),
    error: z.object({ code: z.enum(ATTESTATION_VERIFY_ERRORS), message: z.string() }),
  }),
]);
export type AttestationVerifyReply = z.output<typeof AttestationVerifyReplySchema>;

/** What a revocation is matched against: a result, or a bare node id before any result. */
export interface RevocationSubject {
  node_id: string;
  measurement?: TdMeasurement | null;
  pck_serial?: string | null;
  fmspc?: string | null;
  advisory_ids?: readonly string[];
}

// Serials are compared as numbers would be: case and leading zeros do not matter.
function serial(hex: string): string {
  return hex.toLowerCase().replace(/^0+(?=.)/, "");
}

/**
 * True when the revocation applies: every field it sets matches the subject (`node_id`,
 * `mrtd` against the measurement's MRTD, `fmspc`, `pck_serial`, `advisory_id` among the
 * subject's advisories). A subject missing a field the revocation sets does not match it.
 */
export function revocationMatches(revocation: Revocation, subject: RevocationSubject): boolean {
  const r = revocation;
  if (r.node_id !== undefined && r.node_id !== subject.node_id) return false;
  if (r.mrtd !== undefined && r.mrtd !== subject.measurement?.mrtd?.toLowerCase()) return false;
  if (r.fmspc !== undefined && r.fmspc !== subject.fmspc?.toLowerCase()) return false;
  if (r.pck_serial !== undefined) {
    if (!subject.pck_serial || serial(r.pck_serial) !== serial(subject.pck_serial)) return false;
  }
  if (r.advisory_id !== undefined && !(subject.advisory_ids ?? []).includes(r.advisory_id)) {
    return false;
  }
  return (
    r.node_id !== undefined ||
    r.mrtd !== undefined ||
    r.fmspc !== undefined ||
    r.pck_serial !== undefined ||
    r.advisory_id !== undefined
  );
}

/** The first revocation that applies to the subject, if any. */
export function findRevocation(
  revocations: Iterable<Revocation>,
  subject: RevocationSubject,
): Revocation | undefined {
  for (const r of revocations) if (revocationMatches(r, subject)) return r;
  return undefined;
}

export const ATTESTATION_UNUSABLE_REASONS = [
  "not_attested",
  "revoked",
  "failed",
  "expired",
  "model_not_approved",
  "endpoint_changed",
  "unbound",
  "key_mismatch",
] as const;
export type AttestationUnusableReason = (typeof ATTESTATION_UNUSABLE_REASONS)[number];

export type AttestationVerdict =
  { usable: true } | { usable: false; reason: AttestationUnusableReason; detail: string };

/**
 * Whether a node's latest result lets a payload through, from memory only: the result
 * exists, no revocation in `revocations` applies (checked here too, so a revocation takes
 * effect the moment the consumer's watch delivers it, before the attestation service
 * republishes), it passed, it has not expired at `now` (epoch ms), it binds a TLS key, it
 * was made at the node's current `endpoint` (when `node` is given: an endpoint change
 * withdraws it at once), and, when `model` is given, an approved measurement for that model
 * matched. Fail closed: anything missing is unusable. Pass e.g.
 * `revocationsKvMap.map.values()`.
 */
export function attestationVerdict(
  result: AttestationResult | undefined,
  revocations: Iterable<Revocation>,
  now: number,
  model?: string,
  node?: { endpoint: string },
): AttestationVerdict {
  if (result === undefined) {
    return { usable: false, reason: "not_attested", detail: "no attestation result" };
  }
  const revoked = findRevocation(revocations, result);
  if (revoked) {
    return {
      usable: false,
      reason: "revoked",
      detail: `revoked (${revoked.id}): ${revoked.reason}`,
    };
  }
  if (result.reason_code === ATTESTATION_FAILURES.revoked) {
    return { usable: false, reason: "revoked", detail: result.reason ?? "revoked" };
  }
  if (!result.ok) {
    return { usable: false, reason: "failed", detail: result.reason ?? "attestation failed" };
  }
  if (!(now < result.expires_at)) {
    return {
      usable: false,
      reason: "expired",
      detail: `expired at ${new Date(result.expires_at).toISOString()}`,
    };
  }
  if (result.tls_key_sha256 === null) {
    return { usable: false, reason: "unbound", detail: "the attestation binds no TLS key" };
  }
  if (node !== undefined && result.endpoint !== node.endpoint) {
    return {
      usable: false,
      reason: "endpoint_changed",
      detail: "the node's endpoint changed since it was attested",
    };
  }
  if (model !== undefined && !result.approved_models.includes(model)) {
    return {
      usable: false,
      reason: "model_not_approved",
      detail: `measurement not approved for ${model}`,
    };
  }
  return { usable: true };
}

/** `attestationVerdict(...).usable`: the dispatcher's hot-path check. */
export function isAttestationUsable(
  result: AttestationResult | undefined,
  revocations: Iterable<Revocation>,
  now: number,
  model?: string,
  node?: { endpoint: string },
): boolean {
  return attestationVerdict(result, revocations, now, model, node).usable;
}
