// The protocol between the bench coordinator (run.ts) and the load generator (load.ts): one
// JSON plan per stdin line, one JSON result per stdout line, in order.

/** One closed-loop load round against one origin. */
export interface LoadPlan {
  id: number;
  /** Origin, e.g. `http://127.0.0.1:8080`. */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** Requests kept in flight; each worker sends its next request when the last one ends. */
  concurrency: number;
  /** No request starts after this; in-flight ones finish and count. */
  durationMs: number;
  stream: boolean;
  /** Streams: token-bearing events each stream must carry before `[DONE]`. */
  expectTokens?: number;
  /** HTTP/2 to the origin: `h2c` (prior knowledge) or `h2` (TLS, ALPN); default HTTP/1.1. */
  protocol?: "h2c" | "h2";
  /** `h2`: the PEM certificate the origin presents, trusted for this plan's connections. */
  caPem?: string;
  /**
   * Worker `i` of `n` sends its first request `i / n × spreadStartsMs` after the round
   * starts, so that arrivals are spread instead of all workers starting at once.
   */
  spreadStartsMs?: number;
  /**
   * A tier-4 plan: each request's body is sealed on the client to this session's key
   * (`@zml/seal`, one channel per session, its next `seq` each time) and sent as the sealed envelope, and
   * its answer is opened on the client, as the SDK does. Timings include both.
   */
  sealed?: SealedSession;
  /**
   * Streams: time to first token is taken at the first complete event (for `sealed`: the
   * first event opened) instead of at the first body bytes.
   */
  ttftAtEvent?: boolean;
}

/** The session a sealed plan seals to (from `POST /v1/sessions`, its quote verified). */
export interface SealedSession {
  sessionId: string;
  /** `session_public_key`: base64 SPKI DER. */
  sessionPublicKey: string;
  model: string;
}

/** Nearest-rank percentiles in milliseconds. */
export interface Percentiles {
  p50: number;
  p99: number;
  /** The largest sample. */
  max: number;
  count: number;
}

export interface StreamFigures {
  /** Request sent → first body bytes (the first token event). */
  ttft: Percentiles;
  /** Time between two successive body reads of one stream. */
  gap: Percentiles;
  /** Streams that lost, garbled or truncated events, or ended with an error event. */
  broken: number;
}

export interface LoadResult {
  id: number;
  completed: number;
  failed: number;
  /** A few failure descriptions, for the report. */
  failures: string[];
  elapsedMs: number;
  /** Completed requests per second over the round. */
  rps: number;
  /** Whole-request latency (streams: until `[DONE]`). */
  latency: Percentiles;
  stream?: StreamFigures;
}
