import {
  InvalidSubjectTokenError,
  NODE_ID_PATTERN,
  backoffDelayMs,
  type NodeObservation,
  type NodeState,
  type NodeStatus,
} from "@zml/contracts";
import type { HealthConfig } from "./config.ts";
import { NodeMismatchError } from "./errors.ts";
import type {
  MetricsReading,
  PrefillTotals,
  PrefixCacheReading,
  TokenLatencyTotals,
} from "./metrics-reading.ts";
import { healthScore } from "./score.ts";

/** Outcome of one poll of a node: a reading, or why there was none. */
export type ProbeResult =
  | { readonly ok: true; readonly reading: MetricsReading }
  | { readonly ok: false; readonly error: string };

/** One dispatch outcome inside the error-rate window. */
export interface ObservationMark {
  /** Epoch ms the dispatch happened (the observation's `at`). */
  readonly at: number;
  /** Whether it failed on the node's side (5xx, network error, timeout). */
  readonly failed: boolean;
}

/** Throughput measured between two probes. */
export interface TokensPerSecondSample {
  readonly at: number;
  readonly tokensPerSecond: number;
}

/**
 * Everything the aggregator knows about one node. Plain data: safe to `JSON.stringify`, and
 * never mutated — every function here returns a new object.
 */
export interface NodeHealth {
  readonly nodeId: string;
  /** Identity of the serving process last seen; a different one starts a fresh history. */
  readonly instanceId: string | null;
  readonly status: NodeStatus;
  /** Waiting for a successful probe before the node may become Active. */
  readonly probePending: boolean;
  /** Why the node is in its status, for operators. */
  readonly statusReason: string;
  /** Epoch ms the status last changed. */
  readonly statusSince: number;
  readonly createdAt: number;
  /** While Isolated: when the isolation period ends. */
  readonly isolatedUntil: number | null;
  /** Isolations in the current unstable streak; the exponent of the isolation backoff. */
  readonly isolations: number;
  /** Since when the node has been continuously Active. */
  readonly activeSince: number | null;
  readonly consecutiveFailures: number;
  /** Last probe results, newest last; `true` is a failure. */
  readonly recentProbeFailures: readonly boolean[];
  /** Why the last probe failed, when it did. */
  readonly lastError: string | null;
  /** Epoch ms of the last probe, and of the last successful one. */
  readonly checkedAt: number | null;
  readonly lastOkAt: number | null;
  /** Epoch ms of the last dispatch that succeeded. */
  readonly lastInferenceOkAt: number | null;
  readonly running: number;
  readonly waiting: number;
  readonly queueDepth: number;
  readonly kvCacheUsage: number | null;
  readonly freeMemoryGib: number | null;
  /** EWMAs over successful dispatches. */
  readonly latencyEwmaMs: number | null;
  readonly ttftEwmaMs: number | null;
  /** EWMA of generation throughput while the node was generating. */
  readonly tokensPerSecond: number | null;
  readonly tokensPerSecondHistory: readonly TokensPerSecondSample[];
  /** Generation counter at the last probe that reported one, to measure the next delta. */
  readonly lastTokenCount: { readonly at: number; readonly generationTokensTotal: number } | null;
  /**
   * EWMA of one request's generation speed (tokens per second of a single request), from the
   * time-per-output-token histogram. Unlike {@link NodeHealth.tokensPerSecond} it does not
   * depend on how much traffic the node gets, so routing can derive capacity from it.
   */
  readonly requestTokensPerSecond: number | null;
  /** That histogram's totals at the last probe that reported them. */
  readonly lastTokenLatency: TokenLatencyTotals | null;
  /**
   * Share of prompt tokens served from the prefix cache over the last poll interval (0–1);
   * `null` when the node reports no prefix-cache figures or saw no prompt in the interval.
   */
  readonly prefixCacheHitRate: number | null;
  /** The prefix-cache counters at the last probe that reported them, to measure the next delta. */
  readonly lastPrefixCache: { readonly queries: number; readonly hits: number } | null;
  /** EWMA of prompt tokens computed (not served from cache) per second of prefill. */
  readonly prefillTokensPerSecond: number | null;
  /** The prefill totals at the last probe that reported them. */
  readonly lastPrefill: PrefillTotals | null;
  /** Tokens the node's KV cache holds in all, as last reported. */
  readonly kvCacheCapacityTokens: number | null;
  /** Model ids the engine last said it serves; `null` when it did not say. */
  readonly servedModels: readonly string[] | null;
  /** Dispatch outcomes inside the error window, oldest first. */
  readonly recentObservations: readonly ObservationMark[];
  /** Failed share of recent dispatches; see {@link errorRateOf}. */
  readonly errorRate: number;
  /** 0–100, from queue depth and error rate; see {@link healthScore}. */
  readonly healthScore: number;
}

/**
 * A node the aggregator has just learned about. It is Degraded with `probePending` — not
 * routable — until its first successful probe.
 *
 * @throws {InvalidSubjectTokenError} when `nodeId` is not a valid node id.
 */
export function createNodeHealth(nodeId: string, now: number): NodeHealth {
  if (!NODE_ID_PATTERN.test(nodeId)) throw new InvalidSubjectTokenError(nodeId);
  return {
    nodeId,
    instanceId: null,
    status: "Degraded",
    probePending: true,
    statusReason: "new node: waiting for its first successful probe",
    statusSince: now,
    createdAt: now,
    isolatedUntil: null,
    isolations: 0,
    activeSince: null,
    consecutiveFailures: 0,
    recentProbeFailures: [],
    lastError: null,
    checkedAt: null,
    lastOkAt: null,
    lastInferenceOkAt: null,
    running: 0,
    waiting: 0,
    queueDepth: 0,
    kvCacheUsage: null,
    freeMemoryGib: null,
    latencyEwmaMs: null,
    ttftEwmaMs: null,
    tokensPerSecond: null,
    tokensPerSecondHistory: [],
    lastTokenCount: null,
    requestTokensPerSecond: null,
    lastTokenLatency: null,
    prefixCacheHitRate: null,
    lastPrefixCache: null,
    prefillTokensPerSecond: null,
    lastPrefill: null,
    kvCacheCapacityTokens: null,
    servedModels: null,
    recentObservations: [],
    errorRate: 0,
    healthScore: healthScore({ queueDepth: 0, errorRate: 0, maxConcurrency: 1 }),
  };
}

/**
 * Folds one poll of the node into its health.
 *
 * - Success: refreshes load, memory, identity and throughput, clears the failure streak, and
 *   makes the node Active unless it is inside an isolation period or its recent dispatch error
 *   rate still demotes it. A probe reporting a different `instanceId` than before starts the
 *   node's history afresh (error window, EWMAs, backoff), then applies the probe.
 * - Failure: extends the failure streak. Degraded after `degradeAfterFailures` in a row;
 *   Isolated after `isolateAfterFailures` in a row or that many among the last
 *   `probeWindowSize` probes; and at once if the node was on probation after an isolation.
 * - During an isolation period the data is recorded but the status does not change. Once it
 *   elapses the node is Degraded with `probePending` until a probe succeeds.
 */
export function applyProbe(
  health: NodeHealth,
  probe: ProbeResult,
  config: HealthConfig,
  now: number,
): NodeHealth {
  let h = settle(health, config, now);
  if (!probe.ok) {
    h = recordFailedProbe(h, probe.error, config, now);
    if (isIsolating(h, now)) return rescore(h, config, now);
    const failures = h.recentProbeFailures.filter(Boolean).length;
    if (h.probePending && h.isolations > 0) {
      return rescore(
        isolate(h, config, now, `probe failed on probation: ${probe.error}`),
        config,
        now,
      );
    }
    if (
      h.consecutiveFailures >= config.isolateAfterFailures ||
      failures >= config.isolateAfterFailures
    ) {
      const reason = `${failures} of the last ${h.recentProbeFailures.length} probes failed`;
      return rescore(isolate(h, config, now, reason), config, now);
    }
    if (h.consecutiveFailures >= config.degradeAfterFailures) {
      const reason = `${h.consecutiveFailures} consecutive failed probe(s): ${probe.error}`;
      return rescore(withStatus(h, "Degraded", reason, now), config, now);
    }
    return rescore(h, config, now);
  }

  const previousId = h.instanceId;
  const nextId = probe.reading.instanceId;
  const replaced = previousId !== null && nextId !== null && nextId !== previousId;
  if (replaced) h = createNodeHealth(h.nodeId, now);
  h = recordReading(h, probe.reading, config, now);
  if (isIsolating(h, now)) return rescore(h, config, now);
  // The isolation already paid for the errors that caused it; judging the node on them again
  // after its probation probe would isolate it twice for one incident.
  if (h.probePending && h.isolations > 0) h = { ...h, recentObservations: [] };
  const verdict = errorVerdict(h, config, now);
  if (verdict.kind === "isolate") {
    return rescore(isolate(h, config, now, verdict.reason), config, now);
  }
  if (verdict.kind === "degrade") {
    return rescore(withStatus(h, "Degraded", verdict.reason, now), config, now);
  }
  const reason = replaced
    ? `new instance ${nextId} (was ${previousId}): history reset`
    : h.status === "Active"
      ? h.statusReason
      : "probe succeeded";
  return rescore({ ...withStatus(h, "Active", reason, now), probePending: false }, config, now);
}

/**
 * Folds one dispatch outcome (from the dispatcher) into the node's health: the error-rate
 * window, the latency and TTFT EWMAs, and the last successful inference time.
 *
 * A dispatch counts as the node's failure for a 5xx, a network error or a timeout; a 4xx
 * (including 429) is the request's or the client's problem and counts as a success. Once the
 * window (last `errorWindowMs`) holds at least `minObservations`, an error rate at or above
 * `degradeErrorRate` demotes an Active node to Degraded and one at or above
 * `isolateErrorRate` isolates it — while its probes may still be succeeding.
 *
 * @throws {NodeMismatchError} when the observation is for another node.
 */
export function applyObservation(
  health: NodeHealth,
  observation: NodeObservation,
  config: HealthConfig,
  now: number,
): NodeHealth {
  if (observation.node_id !== health.nodeId) {
    throw new NodeMismatchError(health.nodeId, observation.node_id);
  }
  let h = settle(health, config, now);
  h = recordObservation(h, observation, config, now);
  // Only an Active or Degraded node out of probation is judged on its dispatches; a node
  // waiting for a probe is decided by that probe.
  if (h.status === "Isolated" || h.probePending) return rescore(h, config, now);
  const verdict = errorVerdict(h, config, now);
  if (verdict.kind === "isolate") {
    return rescore(isolate(h, config, now, verdict.reason), config, now);
  }
  if (verdict.kind === "degrade" && h.status === "Active") {
    return rescore(withStatus(h, "Degraded", verdict.reason, now), config, now);
  }
  return rescore(h, config, now);
}

/**
 * The node's state as broadcast on the bus (contracts `NodeStateSchema`). An isolation period
 * that has elapsed by `now` shows as Degraded with `probe_pending`.
 */
export function toNodeState(health: NodeHealth, now: number): NodeState {
  const h = leaveElapsedIsolation(health, now);
  const count = (n: number): number => Math.max(0, Math.round(n));
  return {
    type: "node.state.v1",
    node_id: h.nodeId,
    status: h.status,
    probe_pending: h.probePending,
    queue_depth: count(h.queueDepth),
    running: count(h.running),
    waiting: count(h.waiting),
    kv_cache_usage: h.kvCacheUsage === null ? null : Math.min(1, Math.max(0, h.kvCacheUsage)),
    health_score: Math.min(100, Math.max(0, h.healthScore)),
    consecutive_failures: h.consecutiveFailures,
    last_error: h.lastError,
    checked_at: Math.trunc(h.checkedAt ?? h.createdAt),
    last_ok_at: h.lastOkAt === null ? null : Math.trunc(h.lastOkAt),
    free_memory_gib: h.freeMemoryGib === null ? null : Math.max(0, h.freeMemoryGib),
    last_inference_at: h.lastInferenceOkAt === null ? null : Math.trunc(h.lastInferenceOkAt),
    tokens_per_second: h.tokensPerSecond === null ? null : Math.max(0, h.tokensPerSecond),
    request_tokens_per_second:
      h.requestTokensPerSecond === null ? null : Math.max(0, h.requestTokensPerSecond),
    latency_ewma_ms: h.latencyEwmaMs === null ? null : Math.max(0, h.latencyEwmaMs),
    ttft_ewma_ms: h.ttftEwmaMs === null ? null : Math.max(0, h.ttftEwmaMs),
    instance_id: h.instanceId,
    prefix_cache_hit_rate:
      h.prefixCacheHitRate === null ? null : Math.min(1, Math.max(0, h.prefixCacheHitRate)),
    prefill_tokens_per_second:
      h.prefillTokensPerSecond !== null && h.prefillTokensPerSecond > 0
        ? h.prefillTokensPerSecond
        : null,
    kv_cache_capacity_tokens:
      h.kvCacheCapacityTokens !== null && h.kvCacheCapacityTokens >= 1
        ? Math.round(h.kvCacheCapacityTokens)
        : null,
    served_models: h.servedModels === null ? null : [...h.servedModels],
    // What the node is registered for is not part of its health: the aggregator, which knows
    // the registration, fills this in (see `unservedModels`).
    unserved_models: [],
  };
}

/** Only an Active node that is not waiting for a probe receives traffic. */
export function isRoutable(health: NodeHealth): boolean {
  return health.status === "Active" && !health.probePending;
}

/**
 * Failed share of the dispatches in the window. Until the window holds `minObservations`,
 * the missing ones count as successes, so a single early failure cannot zero a node's score.
 */
export function errorRateOf(marks: readonly ObservationMark[], minObservations: number): number {
  let failed = 0;
  for (const mark of marks) if (mark.failed) failed++;
  return failed === 0 ? 0 : failed / Math.max(marks.length, minObservations, 1);
}

// ---- transitions -------------------------------------------------------------------------

/** Time-driven changes owed before anything else is applied. */
function settle(health: NodeHealth, config: HealthConfig, now: number): NodeHealth {
  const h = leaveElapsedIsolation(health, now);
  return stableLongEnough(h, config, now) && h.isolations > 0 ? { ...h, isolations: 0 } : h;
}

function leaveElapsedIsolation(h: NodeHealth, now: number): NodeHealth {
  if (h.status !== "Isolated" || h.isolatedUntil === null || now < h.isolatedUntil) return h;
  return {
    ...h,
    status: "Degraded",
    probePending: true,
    statusReason: "isolation over: waiting for a successful probe",
    statusSince: h.isolatedUntil,
    isolatedUntil: null,
  };
}

function isIsolating(h: NodeHealth, now: number): boolean {
  return h.status === "Isolated" && h.isolatedUntil !== null && now < h.isolatedUntil;
}

function stableLongEnough(h: NodeHealth, config: HealthConfig, now: number): boolean {
  return (
    h.status === "Active" && h.activeSince !== null && now - h.activeSince >= config.stableResetMs
  );
}

function isolate(h: NodeHealth, config: HealthConfig, now: number, reason: string): NodeHealth {
  const isolations = (stableLongEnough(h, config, now) ? 0 : h.isolations) + 1;
  const period = backoffDelayMs(
    { firstMs: config.isolationBaseMs, maxMs: config.isolationMaxMs },
    isolations,
  );
  return {
    ...h,
    status: "Isolated",
    probePending: false,
    statusReason: `${reason}; isolated for ${Math.round(period / 1000)} s`,
    statusSince: now,
    isolatedUntil: now + period,
    isolations,
    activeSince: null,
  };
}

function withStatus(h: NodeHealth, status: NodeStatus, reason: string, now: number): NodeHealth {
  if (h.status === status) return { ...h, statusReason: reason };
  return {
    ...h,
    status,
    statusReason: reason,
    statusSince: now,
    activeSince: status === "Active" ? now : null,
  };
}

type Verdict =
  { readonly kind: "ok" } | { readonly kind: "degrade" | "isolate"; readonly reason: string };

function errorVerdict(h: NodeHealth, config: HealthConfig, now: number): Verdict {
  const marks = inWindow(h.recentObservations, config, now);
  if (marks.length < config.minObservations) return { kind: "ok" };
  const rate = errorRateOf(marks, config.minObservations);
  const reason = `error rate ${Math.round(rate * 100)}% over ${marks.length} dispatches`;
  if (rate >= config.isolateErrorRate) return { kind: "isolate", reason };
  if (rate >= config.degradeErrorRate) return { kind: "degrade", reason };
  return { kind: "ok" };
}

function rescore(h: NodeHealth, config: HealthConfig, now: number): NodeHealth {
  const recentObservations = inWindow(h.recentObservations, config, now);
  const errorRate = errorRateOf(recentObservations, config.minObservations);
  const probes = h.recentProbeFailures;
  const score = healthScore({
    queueDepth: h.queueDepth,
    errorRate,
    maxConcurrency: config.maxConcurrency,
    probeFailureRate: probes.length === 0 ? 0 : probes.filter(Boolean).length / probes.length,
  });
  return { ...h, recentObservations, errorRate, healthScore: score };
}

// ---- recording ---------------------------------------------------------------------------

function recordFailedProbe(
  h: NodeHealth,
  error: string,
  config: HealthConfig,
  now: number,
): NodeHealth {
  return {
    ...h,
    checkedAt: now,
    consecutiveFailures: h.consecutiveFailures + 1,
    lastError: error,
    recentProbeFailures: keepLast([...h.recentProbeFailures, true], config.probeWindowSize),
  };
}

function recordReading(
  h: NodeHealth,
  reading: MetricsReading,
  config: HealthConfig,
  now: number,
): NodeHealth {
  return {
    ...h,
    ...throughput(h, reading.generationTokensTotal, config, now),
    ...requestSpeed(h, reading.tokenLatency, config),
    ...prefixCacheHits(h, reading.prefixCache),
    ...prefillSpeed(h, reading.prefill, config),
    kvCacheCapacityTokens: reading.kvCacheCapacityTokens,
    servedModels: reading.servedModels,
    instanceId: reading.instanceId ?? h.instanceId,
    checkedAt: now,
    lastOkAt: now,
    consecutiveFailures: 0,
    lastError: null,
    recentProbeFailures: keepLast([...h.recentProbeFailures, false], config.probeWindowSize),
    running: reading.running,
    waiting: reading.waiting,
    queueDepth: reading.queueDepth,
    kvCacheUsage: reading.kvCacheUsage,
    freeMemoryGib: reading.freeMemoryGib,
  };
}

/**
 * Tokens per second from the generation counter's growth since the last probe. Intervals in
 * which nothing was generated are skipped: they measure idleness, not speed, and would drag
 * the estimate routing divides by toward zero. A counter that went backwards (a restart the
 * node did not announce through `instanceId`) only resets the baseline.
 */
function throughput(
  h: NodeHealth,
  total: number | null,
  config: HealthConfig,
  now: number,
): Pick<NodeHealth, "tokensPerSecond" | "tokensPerSecondHistory" | "lastTokenCount"> {
  const unchanged = {
    tokensPerSecond: h.tokensPerSecond,
    tokensPerSecondHistory: h.tokensPerSecondHistory,
  };
  if (total === null) return { ...unchanged, lastTokenCount: h.lastTokenCount };
  const baseline = { at: now, generationTokensTotal: total };
  const last = h.lastTokenCount;
  if (last === null || now <= last.at || total <= last.generationTokensTotal) {
    return { ...unchanged, lastTokenCount: baseline };
  }
  const rate = ((total - last.generationTokensTotal) * 1000) / (now - last.at);
  return {
    tokensPerSecond: ewma(h.tokensPerSecond, rate, config.ewmaAlpha),
    tokensPerSecondHistory: keepLast(
      [...h.tokensPerSecondHistory, { at: now, tokensPerSecond: rate }],
      config.tokensPerSecondHistorySize,
    ),
    lastTokenCount: baseline,
  };
}

/**
 * One request's tokens per second from the time-per-output-token histogram's growth since
 * the last probe: Δcount / Δsum. An interval with no new observation keeps the estimate (no
 * token, no measure); totals that went backwards (an unannounced restart) only reset the
 * baseline.
 */
function requestSpeed(
  h: NodeHealth,
  totals: TokenLatencyTotals | null,
  config: HealthConfig,
): Pick<NodeHealth, "requestTokensPerSecond" | "lastTokenLatency"> {
  if (totals === null) {
    return { requestTokensPerSecond: h.requestTokensPerSecond, lastTokenLatency: null };
  }
  const last = h.lastTokenLatency;
  const tokens = last === null ? 0 : totals.count - last.count;
  const seconds = last === null ? 0 : totals.seconds - last.seconds;
  if (!(tokens > 0 && seconds > 0)) {
    return { requestTokensPerSecond: h.requestTokensPerSecond, lastTokenLatency: totals };
  }
  return {
    requestTokensPerSecond: ewma(h.requestTokensPerSecond, tokens / seconds, config.ewmaAlpha),
    lastTokenLatency: totals,
  };
}

/**
 * The interval's prefix-cache hit rate: Δhits ÷ Δqueries between this probe and the last, or
 * the engine's own rate when it gives one. No prompt in the interval, no baseline yet, or
 * counters that went backwards (an unannounced restart) read as unknown (`null`), never as 0.
 */
function prefixCacheHits(
  h: NodeHealth,
  cache: PrefixCacheReading | null,
): Pick<NodeHealth, "prefixCacheHitRate" | "lastPrefixCache"> {
  if (cache === null) return { prefixCacheHitRate: null, lastPrefixCache: null };
  if (cache.kind === "rate") {
    return { prefixCacheHitRate: Math.min(1, Math.max(0, cache.hitRate)), lastPrefixCache: null };
  }
  const now = { queries: cache.queries, hits: cache.hits };
  const last = h.lastPrefixCache;
  if (last === null) return { prefixCacheHitRate: null, lastPrefixCache: now };
  const queries = now.queries - last.queries;
  const hits = now.hits - last.hits;
  if (!(queries > 0) || hits < 0) return { prefixCacheHitRate: null, lastPrefixCache: now };
  return { prefixCacheHitRate: Math.min(1, hits / queries), lastPrefixCache: now };
}

/**
 * Prefill speed from the growth of the computed prompt tokens and of the prefill time since
 * the last probe (EWMA). An interval without prefill keeps the estimate; totals that went
 * backwards only reset the baseline.
 */
function prefillSpeed(
  h: NodeHealth,
  totals: PrefillTotals | null,
  config: HealthConfig,
): Pick<NodeHealth, "prefillTokensPerSecond" | "lastPrefill"> {
  if (totals === null) {
    return { prefillTokensPerSecond: h.prefillTokensPerSecond, lastPrefill: null };
  }
  const last = h.lastPrefill;
  const tokens = last === null ? 0 : totals.tokens - last.tokens;
  const seconds = last === null ? 0 : totals.seconds - last.seconds;
  if (!(tokens > 0 && seconds > 0)) {
    return { prefillTokensPerSecond: h.prefillTokensPerSecond, lastPrefill: totals };
  }
  return {
    prefillTokensPerSecond: ewma(h.prefillTokensPerSecond, tokens / seconds, config.ewmaAlpha),
    lastPrefill: totals,
  };
}

function recordObservation(
  h: NodeHealth,
  observation: NodeObservation,
  config: HealthConfig,
  now: number,
): NodeHealth {
  const mark = { at: observation.at, failed: isNodeFailure(observation) };
  const recentObservations = appendInWindow(h.recentObservations, mark, config, now);
  if (observation.outcome !== "ok") return { ...h, recentObservations };
  return {
    ...h,
    recentObservations,
    latencyEwmaMs: ewma(h.latencyEwmaMs, observation.latency_ms, config.ewmaAlpha),
    ttftEwmaMs:
      observation.ttft_ms === null
        ? h.ttftEwmaMs
        : ewma(h.ttftEwmaMs, observation.ttft_ms, config.ewmaAlpha),
    lastInferenceOkAt: Math.max(h.lastInferenceOkAt ?? observation.at, observation.at),
  };
}

function isNodeFailure(observation: NodeObservation): boolean {
  switch (observation.outcome) {
    case "ok":
      return false;
    case "network_error":
    case "timeout":
      return true;
    case "http_error":
      return observation.status === null || observation.status >= 500;
  }
}

/**
 * `inWindow` of `marks` with `mark` appended, built as one new array. The aggregator applies
 * every dispatch's observation, and a full window is `errorWindowMaxSize` marks: copying,
 * filtering and trimming it as three arrays per observation was most of the aggregator's
 * garbage under load.
 */
function appendInWindow(
  marks: readonly ObservationMark[],
  mark: ObservationMark,
  config: HealthConfig,
  now: number,
): readonly ObservationMark[] {
  const cutoff = now - config.errorWindowMs;
  let inside = mark.at > cutoff ? 1 : 0;
  for (const m of marks) if (m.at > cutoff) inside++;
  // The oldest marks inside the window beyond the size limit are dropped, as keepLast does.
  let skip = inside - Math.max(0, Math.min(inside, config.errorWindowMaxSize));
  const out: ObservationMark[] = [];
  for (const m of marks) {
    if (!(m.at > cutoff)) continue;
    if (skip > 0) skip--;
    else out.push(m);
  }
  // `skip` is 0 here unless the limit leaves no room at all (a limit of 0).
  if (mark.at > cutoff && skip === 0) out.push(mark);
  return out;
}

/** Marks younger than the window, at most `errorWindowMaxSize`, oldest first. */
function inWindow(
  marks: readonly ObservationMark[],
  config: HealthConfig,
  now: number,
): readonly ObservationMark[] {
  const cutoff = now - config.errorWindowMs;
  // Most calls drop nothing (this runs up to three times per observation): the same array
  // back then, not a copy for the garbage collector.
  if (marks.length <= config.errorWindowMaxSize && marks.every((mark) => mark.at > cutoff)) {
    return marks;
  }
  return keepLast(
    marks.filter((mark) => mark.at > cutoff),
    config.errorWindowMaxSize,
  );
}

function ewma(previous: number | null, sample: number, alpha: number): number {
  return previous === null ? sample : previous + alpha * (sample - previous);
}

function keepLast<T>(items: readonly T[], size: number): T[] {
  return items.slice(Math.max(0, items.length - size));
}
