import { MAX_ATTEMPTS } from "./attempts.ts";
import type { ResolvedPolicy } from "./policy.ts";

/** No derived limit is shorter: a node gets at least this long to start answering. */
export const FIRST_BYTE_FLOOR_MS = 1_000;

/**
 * A plain answer comes whole, once it is generated: the node chosen may take this many times
 * the response time estimated for it (when that is longer than the latency target) before it
 * counts as silent. The estimate is a guess (100 tokens/s for a node never measured), and a
 * node cut while it generates costs the request a second generation elsewhere.
 */
export const PLAIN_ANSWER_HEADROOM = 2;

export interface FirstByteInput {
  /** 1-based number of the attempt about to start. */
  attempt: number;
  /** Time left until the request's deadline. */
  remainingMs: number;
  /**
   * Whether the answer is streamed: then the limit runs until the stream's first event (its
   * headers come at once, before any token), so it bounds the node's time to first token.
   * A plain answer's first byte comes once the whole answer is generated.
   */
  stream: boolean;
  /**
   * The response time estimated for this request on the node about to be tried (the routing
   * decision's `responseMs`: its queue and the tokens expected, at its throughput). Only a
   * plain answer's limit reads it.
   */
  expectedResponseMs: number;
  /** The dispatcher's `DISPATCH_HEADERS_TIMEOUT_MS`: the cap of every derived limit. */
  headersTimeoutMs: number;
}

/**
 * How long one attempt waits for the node's first byte (its answer: for a stream its first
 * event, for a plain answer its body, not its headers alone), so a node that accepts and
 * stays silent costs a fraction of the request's deadline, not all of it.
 *
 * - the policy's `first_byte_timeout_ms` when it sets one;
 * - else the policy's `latency_target_ms`, for a plain answer at least
 *   {@link PLAIN_ANSWER_HEADROOM} × the response time estimated for it on this node (a long
 *   generation is not a silent node);
 * - never below {@link FIRST_BYTE_FLOOR_MS}, never above `headersTimeoutMs`; for a stream,
 *   at most the time left shared by the attempts that may still come (so all 3 fit before
 *   the deadline). Not for a plain answer: its first byte is the whole generation, and a
 *   share of a short deadline would cut an answer the deadline allows.
 *
 * Never more than the time left. Pure.
 */
export function firstByteTimeoutMs(policy: ResolvedPolicy, input: FirstByteInput): number {
  const remaining = Math.max(1, Math.floor(input.remainingMs));
  const explicit = policy.firstByteTimeoutMs;
  if (explicit !== undefined) return Math.min(explicit, remaining);
  const expected = Number.isFinite(input.expectedResponseMs) ? input.expectedResponseMs : 0;
  const target = input.stream
    ? policy.latencyTargetMs
    : Math.max(policy.latencyTargetMs, Math.ceil(PLAIN_ANSWER_HEADROOM * Math.max(0, expected)));
  const derived = Math.min(Math.max(target, FIRST_BYTE_FLOOR_MS), input.headersTimeoutMs);
  if (!input.stream) return Math.min(derived, remaining);
  const attemptsLeft = Math.max(1, MAX_ATTEMPTS - input.attempt + 1);
  const share = Math.max(FIRST_BYTE_FLOOR_MS, Math.floor(remaining / attemptsLeft));
  return Math.min(derived, share, remaining);
}
