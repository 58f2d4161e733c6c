import { z } from "zod";
import { NonceHexSchema, TdMeasurementSchema } from "./attestation.ts";
import { ErrorBodySchema } from "./errors.ts";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Tier-4 sessions: a client's requests pinned to one attested node for the session's life,
 * because the node's ephemeral session key (bound into its TDX quote) only lives there.
 * Rerouting happens only while the session is being opened; afterwards a failed node ends
 * the session (`session_node_unavailable`), never a failover. The dispatchers own the
 * sessions bucket and serve both subjects (queue group `DISPATCHER_QUEUE_GROUP`).
 */

/** KV bucket: session id → {@link Session}. Written and watched into memory by dispatchers. */
export const SESSIONS_BUCKET = "zml_sessions";
/** Request-reply: open a session ({@link SessionCreateRequestSchema}). */
export const SESSION_CREATE_SUBJECT = "zml.session.create";
/** Request-reply: end a session on its owner's request ({@link SessionDeleteRequestSchema}). */
export const SESSION_DELETE_SUBJECT = "zml.session.delete";

/** Session lifetime when the client names none, in seconds. */
export const SESSION_DEFAULT_TTL_S = 3_600;
/** Longest session lifetime a client may ask for, in seconds. */
export const SESSION_MAX_TTL_S = 86_400;
/**
 * How much longer than its session a TD keeps the session key, in seconds: the gateway refuses
 * the session's requests from its expiry on (`session_expired`, precisely), so the TD's own,
 * clock-skewed expiry never decides first.
 */
export const SESSION_KEY_GRACE_S = 30;
/**
 * How long a dispatcher spends opening a session (attesting up to three candidates) before
 * it answers with an error. Callers use a request timeout at least 5 s longer.
 */
export const SESSION_CREATE_BUDGET_MS = 25_000;

/**
 * Ids the gateway issues: `ses-` and 32 lowercase hex characters (128 random bits). Also
 * valid as a KV key and as the chat request's `session_id` (`SESSION_ID_PATTERN`).
 */
export const SESSION_KEY_PATTERN = /^ses-[0-9a-f]{32}$/;

/** True when `id` has the shape of an issued session id (a KV key may be built from it). */
export function isSessionId(id: string): boolean {
  return SESSION_KEY_PATTERN.test(id);
}

/** What the client needs to check the session's node independently. */
export const SessionAttestationSchema = z.object({
  /** The raw TDX quote, base64, for Intel DCAP tooling. */
  quote_b64: z.string(),
  /** The nonce in REPORTDATA's first 32 bytes. */
  nonce_hex: NonceHexSchema,
  /**
   * The node's ephemeral X25519 public key, base64 SPKI DER. REPORTDATA binds SHA-256 of
   * these DER bytes together with `tls_key_sha256` (`reportDataFor` of `@zml/tdx`).
   */
  session_public_key: z.string(),
  /** SHA-256 of the SPKI DER of the TLS key the node attested with (and dispatchers pin). */
  tls_key_sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .nullable()
    .default(null),
  measurement: TdMeasurementSchema,
  tcb_status: z.string().nullable(),
  /** Epoch ms. */
  verified_at: z.number().int(),
});
export type SessionAttestation = z.output<typeof SessionAttestationSchema>;

export const SESSION_END_REASONS = ["deleted", "node_unavailable"] as const;
export type SessionEndReason = (typeof SESSION_END_REASONS)[number];

/**
 * One tier-4 session (`session.v1`), the value under its id in {@link SESSIONS_BUCKET}. A
 * session is usable while `ended` is null and `now < expires_at`. Ended and expired
 * sessions stay in the bucket for a while, so clients get a precise error, then are removed.
 */
export const SessionSchema = z.object({
  type: z.literal("session.v1"),
  session_id: z.string().regex(SESSION_KEY_PATTERN),
  account: z.string().min(1),
  model: z.string().min(1),
  node_id: z.string().regex(NODE_ID_PATTERN),
  /**
   * The node's instance id when the session opened (from its node state), when its
   * framework reports one: a restarted node has lost the session key, so a new instance id
   * ends the session.
   */
  node_instance_id: z.string().nullable().default(null),
  tier: z.literal(4),
  /** The policy the node was chosen by; reported in the routing header of each request. */
  policy: z.string().min(1),
  /** Epoch ms. */
  created_at: z.number().int(),
  /** Epoch ms from which the session answers `session_expired`. */
  expires_at: z.number().int(),
  attestation: SessionAttestationSchema,
  /**
   * Set when the session ended before it expired: `deleted` by its owner (answers
   * `session_not_found`), or `node_unavailable` when its node failed (answers
   * `session_node_unavailable`).
   */
  ended: z
    .object({ at: z.number().int(), reason_code: z.enum(SESSION_END_REASONS), reason: z.string() })
    .nullable()
    .default(null),
});
export type Session = z.output<typeof SessionSchema>;

/**
 * Request on `zml.session.create`, sent by intake after authentication: the account may use
 * tier 4, the model exists and `policy` is the name intake resolved. `nonce` is the client's
 * own nonce for REPORTDATA, when it wants to vouch for freshness itself; otherwise the
 * dispatcher draws one.
 */
export const SessionCreateRequestSchema = z.strictObject({
  type: z.literal("session.create.v1"),
  account: z.string().min(1),
  model: z.string().min(1),
  policy: z.string().min(1).optional(),
  ttl_s: z.number().int().min(1).max(SESSION_MAX_TTL_S).optional(),
  nonce: NonceHexSchema.optional(),
});
export type SessionCreateRequest = z.input<typeof SessionCreateRequestSchema>;

/** Reply on `zml.session.create`: the new session, or an API error. */
export const SessionCreateReplySchema = z.union([
  z.object({ type: z.literal("session.create.reply.v1"), session: SessionSchema }),
  z.object({ type: z.literal("session.create.reply.v1"), error: ErrorBodySchema }),
]);
export type SessionCreateReply = z.output<typeof SessionCreateReplySchema>;

/** Request on `zml.session.delete`: only the owning account may end its session. */
export const SessionDeleteRequestSchema = z.strictObject({
  type: z.literal("session.delete.v1"),
  account: z.string().min(1),
  session_id: z.string().min(1).max(128),
});
export type SessionDeleteRequest = z.input<typeof SessionDeleteRequestSchema>;

/** Reply on `zml.session.delete`: done, or `session_not_found` (also for others' sessions). */
export const SessionDeleteReplySchema = z.union([
  z.object({ type: z.literal("session.delete.reply.v1"), deleted: z.literal(true) }),
  z.object({ type: z.literal("session.delete.reply.v1"), error: ErrorBodySchema }),
]);
export type SessionDeleteReply = z.output<typeof SessionDeleteReplySchema>;
