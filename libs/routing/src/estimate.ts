/*
 * The two estimates every ranking is built from. README.md ("Formulas") explains them;
 * keep the two in step. They take the per-request service time precomputed, so each node
 * costs the decision loop one division instead of several.
 */

const MS_PER_HOUR = 3_600_000;

/**
 * Time one request of `expectedTokens` takes at `tokensPerSecond`, in ms. The loop in rank.ts
 * inlines it (`tokensMs / rate`).
 */
export function serviceMs(expectedTokens: number, tokensPerSecond: number): number {
  return (expectedTokens * 1000) / tokensPerSecond;
}

/**
 * Estimated response time in ms: the node drains its queue and then our request, each taking
 * `serviceMs`, plus the prefill of the prompt tokens the node does not hold (`prefillMs`, 0
 * without prefix affinity), blended with the latency actually observed recently (weight
 * `latencyBias`) when there is an observation (not NaN).
 */
export function responseMsFrom(
  queueDepth: number,
  serviceMs: number,
  latencyEwmaMs: number,
  latencyBias: number,
  prefillMs = 0,
): number {
  const modelled = (queueDepth + 1) * serviceMs + prefillMs;
  // NaN (no observation) fails `>= 0`; an infinite one would swamp every other node.
  if (!(latencyEwmaMs >= 0 && latencyEwmaMs < Infinity)) return modelled;
  return (1 - latencyBias) * modelled + latencyBias * latencyEwmaMs;
}

/**
 * Time the node takes to prefill the prompt tokens it does not hold from `cachedTokens`, at
 * `prefillTokensPerSecond`, in ms.
 */
export function prefillMsFrom(
  promptTokens: number,
  cachedTokens: number,
  prefillTokensPerSecond: number,
): number {
  return (Math.max(0, promptTokens - cachedTokens) * 1000) / prefillTokensPerSecond;
}

/** Estimated cost of one request in USD: the share of a node-hour its service time takes. */
export function costUsdFrom(usdPerNodeHour: number, serviceMs: number): number {
  return usdPerNodeHour * (serviceMs / MS_PER_HOUR);
}
