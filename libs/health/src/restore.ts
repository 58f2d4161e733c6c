import type { NodeState } from "@zml/contracts";
import type { HealthConfig } from "./config.ts";
import { createNodeHealth } from "./node-health.ts";
import type { NodeHealth } from "./node-health.ts";

/**
 * Rebuilds a node's health from its last published `node.state` — what an aggregator that
 * takes a node over from another replica (or restarts) starts from, instead of from nothing.
 *
 * Carried over: identity (`instance_id`, so a node replaced during the handover is still
 * recognised as new by the next probe), load, memory, the throughput and latency EWMAs that
 * routing ranks by, the last successful inference and the failure streak.
 *
 * Not in `node.state`, so lost: the dispatch error window (it refills from new observations),
 * throughput samples, the token-counter and token-latency baselines (the next probe sets
 * them), and the isolation deadline and backoff exponent. For the status that means:
 *
 * - Active → Active (the next probe confirms or demotes it);
 * - Degraded → Degraded, with `probe_pending` kept as published;
 * - Isolated → on probation: Degraded with `probe_pending` after one isolation, so one
 *   successful probe readmits it and one failed probe isolates it again. The remaining
 *   isolation time is unknown; a probe is the gate the state machine uses anyway.
 *
 * `statusSince`, `createdAt` and `activeSince` become `now`, so the backoff reset after a
 * stable period counts from the takeover. Pure.
 *
 * @throws {InvalidSubjectTokenError} when `state.node_id` is not a valid node id.
 */
export function restoreNodeHealth(state: NodeState, config: HealthConfig, now: number): NodeHealth {
  const fresh = createNodeHealth(state.node_id, now);
  const wasIsolated = state.status === "Isolated";
  const status = wasIsolated ? "Degraded" : state.status;
  const probePending = wasIsolated || state.probe_pending;
  const failures = Math.min(state.consecutive_failures, config.probeWindowSize);
  return {
    ...fresh,
    instanceId: state.instance_id,
    status,
    probePending,
    statusReason: wasIsolated
      ? "isolated under another aggregator: waiting for a successful probe"
      : `taken over from another aggregator (${status})`,
    isolations: wasIsolated ? 1 : 0,
    activeSince: status === "Active" && !probePending ? now : null,
    consecutiveFailures: state.consecutive_failures,
    recentProbeFailures: Array.from({ length: failures }, () => true),
    lastError: state.last_error,
    checkedAt: state.checked_at,
    lastOkAt: state.last_ok_at,
    lastInferenceOkAt: state.last_inference_at,
    running: state.running,
    waiting: state.waiting,
    queueDepth: state.queue_depth,
    kvCacheUsage: state.kv_cache_usage,
    freeMemoryGib: state.free_memory_gib,
    latencyEwmaMs: state.latency_ewma_ms,
    ttftEwmaMs: state.ttft_ewma_ms,
    tokensPerSecond: state.tokens_per_second,
    requestTokensPerSecond: state.request_tokens_per_second,
    prefixCacheHitRate: state.prefix_cache_hit_rate,
    prefillTokensPerSecond: state.prefill_tokens_per_second,
    kvCacheCapacityTokens: state.kv_cache_capacity_tokens,
    servedModels: state.served_models,
    healthScore: state.health_score,
  };
}
