/*
 * The two estimates every ranking is built from. README.md ("Formulas") explains them;
 * keep the two in step.
 */

/**
 * Estimated response time in ms: the node drains its queue and then our request, each of
 * `expectedTokens` at the node's aggregate throughput, blended with the latency actually
 * observed recently (weight `latencyBias`) when there is an observation.
 */
export function estimateResponseMs(
  queueDepth: number,
  expectedTokens: number,
  tokensPerSecond: number,
  latencyEwmaMs: number,
  latencyBias: number,
): number {
  const modelled = ((queueDepth + 1) * expectedTokens * 1000) / tokensPerSecond;
  if (!(latencyEwmaMs >= 0) || !Number.isFinite(latencyEwmaMs)) return modelled;
  return (1 - latencyBias) * modelled + latencyBias * latencyEwmaMs;
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
  return (usdPerNodeHour * expectedTokens) / tokensPerSecond / 3600;
}
