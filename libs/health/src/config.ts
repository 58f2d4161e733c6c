/** Thresholds and timings of the node state machine. */
export interface HealthConfig {
  /** The node's `max_concurrency`, used by the health score. */
  readonly maxConcurrency: number;
  /** Consecutive failed probes that demote an Active node to Degraded. */
  readonly degradeAfterFailures: number;
  /**
   * Failed probes that isolate a node: this many in a row, or this many among the last
   * {@link probeWindowSize} probes (which catches nodes that alternate fail/ok).
   */
  readonly isolateAfterFailures: number;
  /** How many recent probe results are kept for the flapping rule. */
  readonly probeWindowSize: number;
  /** Age of the oldest dispatch observation that still counts toward the error rate. */
  readonly errorWindowMs: number;
  /** Cap on observations kept in the window, newest first. */
  readonly errorWindowMaxSize: number;
  /** Observations needed in the window before the error rate can demote a node. */
  readonly minObservations: number;
  /** Error rate at or above which an Active node is demoted to Degraded. */
  readonly degradeErrorRate: number;
  /** Error rate at or above which a node is isolated. */
  readonly isolateErrorRate: number;
  /** First isolation period; each further isolation in an unstable streak doubles it. */
  readonly isolationBaseMs: number;
  /** Longest isolation period. */
  readonly isolationMaxMs: number;
  /** Time continuously Active after which the isolation backoff starts again from the base. */
  readonly stableResetMs: number;
  /** Weight of the newest sample in the latency, TTFT and tokens-per-second EWMAs (0–1]. */
  readonly ewmaAlpha: number;
  /** How many tokens-per-second samples are kept as history. */
  readonly tokensPerSecondHistorySize: number;
}

/** Defaults for a 5 s poll interval. */
export const DEFAULT_HEALTH_CONFIG: HealthConfig = Object.freeze({
  maxConcurrency: 16,
  degradeAfterFailures: 1,
  isolateAfterFailures: 3,
  probeWindowSize: 6,
  errorWindowMs: 60_000,
  errorWindowMaxSize: 200,
  minObservations: 10,
  degradeErrorRate: 0.5,
  isolateErrorRate: 0.8,
  isolationBaseMs: 30_000,
  isolationMaxMs: 10 * 60_000,
  stableResetMs: 5 * 60_000,
  ewmaAlpha: 0.3,
  tokensPerSecondHistorySize: 60,
});
