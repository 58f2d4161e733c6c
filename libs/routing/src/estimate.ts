/*
 * The two estimates every ranking is built from. README.md ("Formulas") explains them;
 * keep the two in step. The decision loop uses the `…From` forms with the per-request
 * service time precomputed, so each node costs one division instead of several.
 */

const MS_PER_HOUR = 3_600_000;

/**
 * Estimated response time in ms: the node drains its queue and then our request, each of
 * `expectedTokens` at the node's aggregate throughput, blended with the latency actually
 * observed recently (weight `latencyBias`) when there is an observation (not NaN).
 */
export function estimateResponseMs(
  queueDepth: number,
  expectedTokens: number,
  tokensPerSecond: number,
  latencyEwmaMs: number,
  latencyBias: number,
): number {
  return responseMsFrom(
    queueDepth,
    serviceMs(expectedTokens, tokensPerSecond),
    latencyEwmaMs,
    latencyBias,
  );
}

/**
 * Estimated cost of one request in USD: the share of a node-hour its tokens take at the
 * node's aggregate throughput.
 */
export function estimateCostUsd(
  usdPerNodeHour: number,
  expectedTokens: number,
  tokensPerSecond: number,
): number {
  return costUsdFrom(usdPerNodeHour, serviceMs(expectedTokens, tokensPerSecond));
}

/** Time one request of `expectedTokens` takes at `tokensPerSecond`, in ms. */
export function serviceMs(expectedTokens: number, tokensPerSecond: number): number {
  return (expectedTokens * 1000) / tokensPerSecond;
}

export function responseMsFrom(
  queueDepth: number,
  serviceMs: number,
  latencyEwmaMs: number,
  latencyBias: number,
): number {
  const modelled = (queueDepth + 1) * serviceMs;
  // NaN (no observation) fails `>= 0`; an infinite one would swamp every other node.
  if (!(latencyEwmaMs >= 0 && latencyEwmaMs < Infinity)) return modelled;
  return (1 - latencyBias) * modelled + latencyBias * latencyEwmaMs;
}

export function costUsdFrom(usdPerNodeHour: number, serviceMs: number): number {
  return usdPerNodeHour * (serviceMs / MS_PER_HOUR);
}
