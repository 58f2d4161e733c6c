/**
 * NATS header names. Intake extracts the routing fields from the client's body once and
 * sends them as headers so the dispatcher never parses the body on the hot path.
 */
export const HEADERS = {
  /** Versioned message type, e.g. `route.request.v1`. */
  type: "Zml-Type",
  requestId: "Zml-Request-Id",
  model: "Zml-Model",
  /** The OpenAI path the client called (`/v1/chat/completions` or `/v1/completions`). */
  path: "Zml-Path",
  stream: "Zml-Stream",
  policy: "Zml-Policy",
  tier: "Zml-Tier",
  acceleratorHint: "Zml-Accelerator-Hint",
  account: "Zml-Account",
  /** Fallback models, comma-separated, tried in order after `model` (OpenAI `models`). */
  fallbackModels: "Zml-Fallback-Models",
  /** Tier 4 session the request belongs to. */
  sessionId: "Zml-Session-Id",
  /**
   * A sealed tier-4 request's `key_id` (the body is the sealed envelope, which the dispatcher
   * forwards as it is): the session key it is sealed to.
   */
  sealedKeyId: "Zml-Sealed-Key-Id",
  /** `provider.sort` from the request (`quality`, `price`, `latency`). */
  sort: "Zml-Sort",
  /** The client's `max_tokens` (or `max_completion_tokens`): the output routing expects. */
  maxTokens: "Zml-Max-Tokens",
  /**
   * The prompt's size and block digests (`<chars>:<base64url>`, `encodePromptPrefix` in
   * @zml/routing), for prefix-affinity routing: digests only, never prompt text. Absent for
   * tier 4 and for prompts shorter than one block.
   */
  prefix: "Zml-Prefix",
  /** On `route.cancel`: the reply inbox of the request to abort. */
  cancelInbox: "Zml-Cancel-Inbox",
  /** Absolute deadline in epoch milliseconds. */
  deadline: "Zml-Deadline",
  /** Reply frames: `full`, `head`, `chunk`, `end` or `error` (see {@link REPLY_KINDS}). */
  replyKind: "Zml-Reply",
  /** Reply frame sequence number, from 0, so the receiver can detect a lost frame. */
  seq: "Zml-Seq",
  /** Upstream HTTP status on `full` and `head` frames. */
  status: "Zml-Status",
  contentType: "Zml-Content-Type",
  /**
   * On `full` and `head` frames: milliseconds the node took (to the whole answer for
   * `full`, to its response headers for `head`), so intake can measure what ZML added.
   */
  nodeMs: "Zml-Node-Ms",
  /** RFC 8941 dictionary describing the routing decision (see `routing-header.ts`). */
  routing: "Zml-Routing",
  /** On `full` and `head` frames: the node's `Retry-After` in seconds, for the caller. */
  retryAfter: "Zml-Retry-After",
  /** On an `accept` reply frame: the replica id of the dispatcher serving the request. */
  dispatcher: "Zml-Dispatcher",
  /**
   * On a route request: the subject where the requester also takes its reply frames as
   * frame batches ({@link REPLY_BATCH}), a sibling of the request's reply inbox (the same
   * subject up to its last token). A requester that sends none gets one message per frame.
   */
  replyBatch: "Zml-Reply-Batch",
} as const;

/** W3C trace context header names, carried on every NATS message. */
export const TRACE_HEADERS = { traceparent: "traceparent", tracestate: "tracestate" } as const;

export const REPLY_KINDS = {
  /** A whole non-streamed response: status, headers and body in one message. */
  full: "full",
  /** Start of a streamed response: status and routing, no body. */
  head: "head",
  /** A slice of the streamed body, forwarded as the node sent it. */
  chunk: "chunk",
  /** The stream completed normally. */
  end: "end",
  /** The request failed; the body is an {@link ErrorBody} JSON document. */
  error: "error",
} as const;
export type ReplyKind = (typeof REPLY_KINDS)[keyof typeof REPLY_KINDS];

/**
 * The frame a dispatcher sends first, the moment it takes a route request: it names the
 * replica (`HEADERS.dispatcher`) so the requester can follow that replica's liveness beats.
 * It carries no sequence number and is not one of the answer's frames.
 */
export const ACCEPT_REPLY_KIND = "accept";

/**
 * Frame batches (`route.reply.batch.v1`): the reply frames one dispatcher connection produces
 * in one event-loop turn for the same requester (the same `Zml-Reply-Batch` subject), in the
 * order they were written, as one NATS message. Its headers: `Zml-Type` = `type`, `Zml-Reply`
 * = `kind`. Its payload (big-endian):
 *
 * ```
 * u8  version (1)
 * u16 frame count N (≥ 1)
 * N × { u8 id length, id (ASCII: the last token of the frame's reply inbox),
 *       u8 kind (index in `kinds`), u32 seq (0xffffffff for `accept`),
 *       u16 meta length, u32 data length }
 * N × { meta, data }      (in the same order; nothing after the last)
 * ```
 *
 * `meta` is the frame's headers as NATS header lines (`Name: value\r\n`), only those a
 * frame sent alone would carry besides `Zml-Reply` and `Zml-Seq` (status, content type,
 * routing, node time, Retry-After, the replica on a first frame); `data` its body. Each frame
 * keeps its own sequence number, so a lost batch is a gap for every stream in it.
 */
export const REPLY_BATCH = {
  type: "route.reply.batch.v1",
  kind: "batch",
  version: 1,
  /** The last token of a batch subject: never a request id (those are base-36 digits). */
  token: "_batch",
  kinds: ["full", "head", "chunk", "end", "error", "accept"],
} as const;

/** HTTP response header that carries the routing metadata to the client. */
export const ROUTING_HTTP_HEADER = "x-zml-routing";

export const MESSAGE_TYPES = {
  routeRequestV1: "route.request.v1",
  routeReplyV1: "route.reply.v1",
  routeReplyBatchV1: "route.reply.batch.v1",
  nodeStateV1: "node.state.v1",
  nodeObservationV1: "node.observation.v1",
} as const;
