/** Tunables of the routing core; every field has a default (see {@link DEFAULT_ROUTING_OPTIONS}). */
export interface RoutingOptions {
  /** Output tokens assumed for a request that does not say how many it expects. */
  expectedTokens: number;
  /** Throughput assumed for a node with no tokens-per-second history yet. */
  defaultTokensPerSecond: number;
  /** Weight (0–1) of the observed latency EWMA in the response-time estimate. */
  latencyBias: number;
  /** Smoothing factor (0–1] of the latency EWMA kept by the live table. */
  latencyEwmaAlpha: number;
  /**
   * Relative width (0–1) of the random jitter applied to the main ranking key, so that
   * candidates within about this fraction of each other are picked in random order and
   * several dispatchers do not pile onto the same node.
   */
  jitter: number;
  /** Quality scores older than this no longer rank candidates. */
  qualityStalenessMs: number;
  /**
   * Age limit of a cloud spot price whose entry names none: past it the node's configured
   * fallback rate applies (see price.ts).
   */
  spotPriceMaxAgeMs: number;
  /** How many ranked candidates a decision lists (the rest only appear in `passedOver`). */
  maxCandidates: number;
  /** Latency target of the built-in `balanced` policy. */
  defaultLatencyTargetMs: number;
  /** `Retry-After` for "no node for this model and tier" rejections. */
  noNodeRetryAfterS: number;
  /** Upper bound of the `Retry-After` computed for saturation. */
  maxRetryAfterS: number;
  /**
   * Shortest shared prefix (characters) worth routing on: a request whose prompt is shorter,
   * or whose prefix no node holds this much of, is ranked exactly as without prefix affinity.
   */
  prefixMinChars: number;
  /** Prefill speed assumed for a node that neither reports nor declares one (tokens/s). */
  defaultPrefillTokensPerSecond: number;
  /** KV-cache size assumed for a node that neither reports nor declares one (tokens). */
  defaultKvCacheTokens: number;
}

export const DEFAULT_ROUTING_OPTIONS: Readonly<RoutingOptions> = Object.freeze({
  expectedTokens: 256,
  defaultTokensPerSecond: 100,
  latencyBias: 0.3,
  latencyEwmaAlpha: 0.2,
  jitter: 0.05,
  qualityStalenessMs: 6 * 60 * 60 * 1000,
  // Three refreshes of the feed's default 5-minute interval: one failed refresh does not
  // throw away a price, a feed down for a quarter of an hour does.
  spotPriceMaxAgeMs: 15 * 60 * 1000,
  maxCandidates: 3,
  defaultLatencyTargetMs: 30_000,
  noNodeRetryAfterS: 5,
  maxRetryAfterS: 60,
  prefixMinChars: 1024,
  defaultPrefillTokensPerSecond: 5_000,
  defaultKvCacheTokens: 65_536,
});

function clamp(value: number | undefined, min: number, max: number, fallback: number): number {
  if (value === undefined || !Number.isFinite(value)) return fallback;
  return Math.min(max, Math.max(min, value));
}

/** Fills defaults and clamps every option into its meaningful range. */
export function resolveOptions(partial: Partial<RoutingOptions> = {}): Readonly<RoutingOptions> {
  const d = DEFAULT_ROUTING_OPTIONS;
  return Object.freeze({
    expectedTokens: clamp(partial.expectedTokens, 1, 1e7, d.expectedTokens),
    defaultTokensPerSecond: clamp(
      partial.defaultTokensPerSecond,
      1e-3,
      1e9,
      d.defaultTokensPerSecond,
    ),
    latencyBias: clamp(partial.latencyBias, 0, 1, d.latencyBias),
    latencyEwmaAlpha: clamp(partial.latencyEwmaAlpha, 1e-3, 1, d.latencyEwmaAlpha),
    jitter: clamp(partial.jitter, 0, 0.5, d.jitter),
    qualityStalenessMs: clamp(
      partial.qualityStalenessMs,
      0,
      Number.MAX_SAFE_INTEGER,
      d.qualityStalenessMs,
    ),
    spotPriceMaxAgeMs: clamp(
      partial.spotPriceMaxAgeMs,
      1,
      Number.MAX_SAFE_INTEGER,
      d.spotPriceMaxAgeMs,
    ),
    maxCandidates: Math.trunc(clamp(partial.maxCandidates, 1, 64, d.maxCandidates)),
    defaultLatencyTargetMs: clamp(partial.defaultLatencyTargetMs, 1, 1e9, d.defaultLatencyTargetMs),
    noNodeRetryAfterS: Math.ceil(clamp(partial.noNodeRetryAfterS, 1, 3600, d.noNodeRetryAfterS)),
    maxRetryAfterS: Math.ceil(clamp(partial.maxRetryAfterS, 1, 3600, d.maxRetryAfterS)),
    prefixMinChars: clamp(partial.prefixMinChars, 0, 1e9, d.prefixMinChars),
    defaultPrefillTokensPerSecond: clamp(
      partial.defaultPrefillTokensPerSecond,
      1,
      1e9,
      d.defaultPrefillTokensPerSecond,
    ),
    defaultKvCacheTokens: clamp(partial.defaultKvCacheTokens, 64, 1e10, d.defaultKvCacheTokens),
  });
}
