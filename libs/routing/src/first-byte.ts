import { MAX_ATTEMPTS } from "./attempts.ts";
import type { ResolvedPolicy } from "./policy.ts";

/** No derived limit is shorter: a node gets at least this long to start answering. */
export const FIRST_BYTE_FLOOR_MS = 1_000;

export interface FirstByteInput {
  /** 1-based number of the attempt about to start. */
  attempt: number;
  /** Time left until the request's deadline. */
  remainingMs: number;
  /**
   * Whether the answer is streamed: then the limit runs until the stream's first event (its
   * headers come at once, before any token), so it bounds the node's time to first token.
   */
  stream: boolean;
  /** The dispatcher's `DISPATCH_HEADERS_TIMEOUT_MS`: the cap, and the limit for plain answers. */
  headersTimeoutMs: number;
}

/**
 * How long one attempt waits for the node's first byte (its response headers; for a stream,
 * its first event), so a node that accepts and stays silent costs a fraction of the
 * request's deadline, not all of it.
 *
 * - the policy's `first_byte_timeout_ms` when it sets one;
 * - else, for a streamed request, its `latency_target_ms` between {@link FIRST_BYTE_FLOOR_MS}
 *   and `headersTimeoutMs`, and at most the time left shared by the attempts that may still
 *   come (so all 3 fit before the deadline);
 * - else (a plain answer, whose headers come only once the whole answer is generated)
 *   `headersTimeoutMs`: a long generation is not a silent node.
 *
 * Never more than the time left. Pure.
 */
export function firstByteTimeoutMs(policy: ResolvedPolicy, input: FirstByteInput): number {
  const remaining = Math.max(1, Math.floor(input.remainingMs));
  const explicit = policy.firstByteTimeoutMs;
  if (explicit !== undefined) return Math.min(explicit, remaining);
  if (!input.stream) return Math.min(input.headersTimeoutMs, remaining);
  const derived = Math.min(
    Math.max(policy.latencyTargetMs, FIRST_BYTE_FLOOR_MS),
    input.headersTimeoutMs,
  );
  const attemptsLeft = Math.max(1, MAX_ATTEMPTS - input.attempt + 1);
  const share = Math.max(FIRST_BYTE_FLOOR_MS, Math.floor(remaining / attemptsLeft));
  return Math.min(derived, share, remaining);
}
