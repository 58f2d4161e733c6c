/** Inputs of {@link healthScore}. */
export interface ScoreInput {
  /** Requests running plus waiting on the node. */
  readonly queueDepth: number;
  /** Fraction 0–1 of recent dispatches to the node that failed on the node's side. */
  readonly errorRate: number;
  /** In-flight requests at which the node counts as full (the fleet's `max_concurrency`). */
  readonly maxConcurrency: number;
  /**
   * Fraction 0–1 of the node's recent health probes that failed (default 0). A node whose
   * probes fail is not known to be healthy, whatever its last good reading said.
   */
  readonly probeFailureRate?: number;
}

/**
 * Health score 0–100:
 *
 * `score = 100 × (1 − errorRate) × (1 − probeFailureRate) × 1 / (1 + queueDepth / maxConcurrency)`
 *
 * - The factors multiply because any one alone should be able to sink a node: a node that
 *   fails every request, or every probe, is worth 0 however idle it is.
 * - Load discounts hyperbolically: an idle node scores 100, a node exactly at its concurrency
 *   limit 50, at twice the limit 33. Load alone never reaches 0, because a busy but healthy
 *   node still beats a failing one, and the ordering between loaded nodes stays meaningful.
 * - Queue depth is divided by the node's own concurrency so a big node with 8 queued
 *   requests is not judged like a small one with 8.
 *
 * The score is non-increasing in `errorRate`, `probeFailureRate` and `queueDepth`, and always
 * within [0, 100]. Out-of-range inputs are clamped: either rate to [0, 1] (NaN counts as 1), negative queue
 * depth to 0 (NaN counts as infinitely deep), a `maxConcurrency` that is not a positive finite
 * number to 1.
 */
export function healthScore(input: ScoreInput): number {
  const errorRate = share(input.errorRate);
  const probeFailureRate = share(input.probeFailureRate ?? 0);
  const queueDepth = Number.isNaN(input.queueDepth) ? Infinity : Math.max(0, input.queueDepth);
  const max = input.maxConcurrency;
  const capacity = Number.isFinite(max) && max > 0 ? max : 1;
  const load = 1 / (1 + queueDepth / capacity);
  return 100 * (1 - errorRate) * (1 - probeFailureRate) * load;
}

function share(rate: number): number {
  return Number.isNaN(rate) ? 1 : Math.min(1, Math.max(0, rate));
}
