import type { NodeState } from "../node-state.ts";

/**
 * What the health aggregator publishes for a node that answered its probe at `checkedAt`:
 * Active, idle, full score, no history (throughput, latencies and instance unknown).
 */
export function activeNodeState(
  nodeId: string,
  checkedAt: number,
  overrides: Partial<NodeState> = {},
): NodeState {
  return {
    type: "node.state.v1",
    node_id: nodeId,
    status: "Active",
    probe_pending: false,
    queue_depth: 0,
    running: 0,
    waiting: 0,
    kv_cache_usage: null,
    health_score: 100,
    consecutive_failures: 0,
    last_error: null,
    checked_at: checkedAt,
    last_ok_at: checkedAt,
    free_memory_gib: null,
    last_inference_at: null,
    tokens_per_second: null,
    request_tokens_per_second: null,
    latency_ewma_ms: null,
    ttft_ewma_ms: null,
    instance_id: null,
    prefix_cache_hit_rate: null,
    prefill_tokens_per_second: null,
    kv_cache_capacity_tokens: null,
    served_models: null,
    unserved_models: [],
    ...overrides,
  };
}
