import { z } from "zod";

/**
 * Stable machine-readable error codes, with the HTTP status they map to where they cross
 * the API and whether a retry of the same request may succeed.
 */
export const ERROR_CODES = {
  invalid_json: { status: 400, retryable: false },
  invalid_request: { status: 400, retryable: false },
  /** A JSON object repeats a key: parsers disagree on which one counts. */
  duplicate_field: { status: 400, retryable: false },
  unauthorized: { status: 401, retryable: false },
  tier_not_allowed: { status: 403, retryable: false },
  not_found: { status: 404, retryable: false },
  unknown_model: { status: 404, retryable: false },
  unknown_policy: { status: 400, retryable: false },
  /** The model is served, but by no node that offers the request's API (e.g. embeddings). */
  api_not_served: { status: 400, retryable: false },
  /**
   * A node endpoint refused by the node address policy (see `NODE_ADDRESS_RULES`): on the
   * gateway's own host (loopback, `localhost`), an unspecified address (0.0.0.0, `::`), a
   * link-local or cloud metadata address or host name, or in the operator's deny list.
   */
  node_address_loopback: { status: 400, retryable: false },
  node_address_unspecified: { status: 400, retryable: false },
  node_address_metadata: { status: 400, retryable: false },
  node_address_denied: { status: 400, retryable: false },
  payload_too_large: { status: 413, retryable: false },
  unsupported_media_type: { status: 415, retryable: false },
  request_timeout: { status: 408, retryable: false },
  rate_limited: { status: 429, retryable: false },
  /** Too many failed authentications from this client address; wait `Retry-After`. */
  auth_throttled: { status: 429, retryable: false },
  /** No node of the policy's families serves the model at the tier. */
  no_node_available: { status: 503, retryable: true },
  /** Nodes serve the model at the tier, but none is active (and, for tiers 3–4, attested). */
  no_usable_node: { status: 503, retryable: true },
  /** Nodes are usable but every one is full, cooling down or already failed this request. */
  saturated: { status: 503, retryable: true },
  upstream_unavailable: { status: 502, retryable: true },
  upstream_timeout: { status: 504, retryable: true },
  stream_interrupted: { status: 502, retryable: true },
  /**
   * The last node tried refused the gateway's own credential for it (the node answered 401
   * or 403): the gateway's configuration for that node is wrong, not the client's key. The
   * node's message is in the dispatcher's log, not in the answer.
   */
  upstream_auth_failed: { status: 502, retryable: false },
  /** The node's answer was not what the call is due: no JSON where JSON is, no SSE where SSE is. */
  bad_upstream_response: { status: 502, retryable: true },
  /** The node's answer exceeded the dispatcher's cap (`DISPATCH_MAX_ANSWER_BYTES`). */
  response_too_large: { status: 502, retryable: false },
  bus_unavailable: { status: 503, retryable: true },
  /**
   * The dispatcher serving the request stopped (its liveness beats ended, or it left on a
   * stop) before any byte of the answer was sent, and no other dispatcher could take it.
   */
  dispatcher_lost: { status: 503, retryable: true },
  /** This intake is stopping and takes no new request; another replica will. */
  shutting_down: { status: 503, retryable: true },
  key_store_unavailable: { status: 503, retryable: true },
  gateway_timeout: { status: 504, retryable: true },
  internal_error: { status: 500, retryable: true },
  /** Tier-4 sessions: unknown, deleted, or another account's session. */
  session_not_found: { status: 404, retryable: false },
  session_expired: { status: 410, retryable: false },
  /** The session's node failed or is no longer usable: the session ended; open a new one. */
  session_node_unavailable: { status: 503, retryable: false },
  /** A tier-4 request (or one naming a session) came in clear: it must be sealed to the TD. */
  sealed_body_required: { status: 400, retryable: false },
  /** A sealed request's `key_id` is not its session's key. */
  sealed_key_mismatch: { status: 400, retryable: false },
  // Answered by the TD proxy on a tier-4 node, in clear, without calling its server.
  /** The sealed envelope, or what it opened to, is not what the format says. */
  sealed_request_invalid: { status: 400, retryable: false },
  /** The ciphertext does not open with the session's key: altered, or sealed to another key. */
  sealed_request_rejected: { status: 400, retryable: false },
  /** The request's `seq` was opened before (a replay), or is too far behind. */
  sealed_request_replayed: { status: 409, retryable: false },
  /** The TD holds no such session key (the session ended, expired, or the TD restarted). */
  session_key_unknown: { status: 410, retryable: false },
} as const;
export type ErrorCode = keyof typeof ERROR_CODES;

export const ErrorCodeSchema = z.enum(Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]]);

/**
 * Why no node could take a request (on every "no viable node" 503): how many nodes of the
 * policy's families serve the model at the tier, and how many of them were out for each
 * reason.
 */
export const SaturationDetailSchema = z.object({
  considered: z.number().int().nonnegative(),
  /** At `max_concurrency`. */
  full: z.number().int().nonnegative(),
  cooling: z.number().int().nonnegative(),
  /** Not `Active` (or not reported on yet). */
  inactive: z.number().int().nonnegative(),
  /** Tier 3/4 nodes without a valid attestation for the model. */
  unattested: z.number().int().nonnegative(),
  /** Already failed earlier in this request. */
  failed: z.number().int().nonnegative(),
});
export type SaturationDetail = z.infer<typeof SaturationDetailSchema>;

/** The error document sent over the bus and, wrapped OpenAI-style, to HTTP clients. */
export const ErrorBodySchema = z.object({
  code: ErrorCodeSchema,
  message: z.string(),
  /** The offending field, as a dotted path, when one input field caused the error. */
  param: z.string().nullable().default(null),
  /** Seconds a client should wait before retrying, for 503s. */
  retry_after_s: z.number().int().positive().optional(),
  saturation: SaturationDetailSchema.optional(),
});
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/** An error that knows its code, offending field and HTTP mapping. */
/** What an error may say besides its code and message. */
export interface ZmlErrorDetails {
  /** The offending field (`null`, the default, when the error is not about one). */
  param?: string | null | undefined;
  /** For answers that say when to come back. */
  retryAfterS?: number | undefined;
  /** How full the fleet was, for a request no node could take. */
  saturation?: SaturationDetail | undefined;
}

export class ZmlError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  readonly param: string | null;
  readonly retryAfterS: number | undefined;
  readonly saturation: SaturationDetail | undefined;
  constructor(
    code: ErrorCode,
    message: string,
    { param = null, retryAfterS, saturation }: ZmlErrorDetails = {},
  ) {
    super(message);
    this.saturation = saturation;
    this.name = "ZmlError";
    this.code = code;
    this.param = param;
    this.retryAfterS = retryAfterS;
    this.status = ERROR_CODES[code].status;
    this.retryable = ERROR_CODES[code].retryable;
  }

  toBody(): ErrorBody {
    const body: ErrorBody = { code: this.code, message: this.message, param: this.param };
    if (this.retryAfterS !== undefined) body.retry_after_s = this.retryAfterS;
    if (this.saturation !== undefined) body.saturation = this.saturation;
    return body;
  }

  static fromBody(body: ErrorBody): ZmlError {
    return new ZmlError(body.code, body.message, {
      param: body.param,
      retryAfterS: body.retry_after_s,
      saturation: body.saturation,
    });
  }
}

/** OpenAI error `type` for a status, so official SDKs raise their matching error class. */
export function openAiErrorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 413 || status === 400 || status === 415) return "invalid_request_error";
  if (status === 429) return "rate_limit_error";
  return "api_error";
}

/**
 * The OpenAI error envelope: `{ error: { message, type, param, code } }`, plus `saturation`
 * on a "no viable node" 503 (SDKs keep unknown fields).
 */
export function toOpenAiError(body: ErrorBody): {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: string;
    saturation?: SaturationDetail;
  };
} {
  const error = {
    message: body.message,
    type: openAiErrorType(ERROR_CODES[body.code].status),
    param: body.param,
    code: body.code,
  };
  return { error: body.saturation ? { ...error, saturation: body.saturation } : error };
}
