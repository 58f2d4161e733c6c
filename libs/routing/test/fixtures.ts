import type { NodeSpec, NodeState, PolicySpec } from "@zml/contracts";
import {
  buildSnapshot,
  compilePolicy,
  createLiveTable,
  type CostEntry,
  type LiveTable,
  type QualityScore,
  type RoutingOptions,
  type RoutingSnapshot,
} from "../src/index.ts";

export const NOW = 1_750_000_000_000;
export const MODEL = "llama-3.1-70b";

export function node(id: string, overrides: Partial<NodeSpec> = {}): NodeSpec {
  return {
    id,
    endpoint: `http://${id}.internal:8000`,
    framework: "vllm",
    accelerator_family: "H100",
    tier: 1,
    models: [MODEL],
    apis: ["chat", "completions"],
    max_concurrency: 16,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: 0,
    ...overrides,
  };
}

export function state(nodeId: string, overrides: Partial<NodeState> = {}): NodeState {
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
    checked_at: NOW,
    last_ok_at: NOW,
    free_memory_gib: null,
    last_inference_at: null,
    tokens_per_second: 1000,
    request_tokens_per_second: null,
    latency_ewma_ms: null,
    ttft_ewma_ms: null,
    instance_id: null,
    ...overrides,
  };
}

export function policySpec(overrides: Partial<PolicySpec> = {}): PolicySpec {
  return {
    name: "test",
    accelerator_preference: [
      { family: "H100", priority: 1 },
      { family: "MI300X", priority: 2 },
    ],
    latency_target_ms: 5000,
    cost_priority: "balanced",
    queue_on_saturation: false,
    max_queue_ms: 0,
    ...overrides,
  };
}

export const policy = (overrides: Partial<PolicySpec> = {}) => compilePolicy(policySpec(overrides));

export function onPrem(target: { node_id: string } | { family: string }, usd: number): CostEntry {
  return { kind: "on_prem", ...target, usd_per_gpu_hour: usd, gpus_per_node: 1 };
}

export function quality(
  target: { node_id: string } | { family: string },
  score: number,
  updatedAt = NOW,
): QualityScore {
  return { model: MODEL, ...target, score, source: "test", updated_at: updatedAt };
}

/** A snapshot plus a live table where every node is Active, idle, at 1000 tok/s. */
export function fleet(
  nodes: NodeSpec[],
  extra: {
    costs?: CostEntry[];
    quality?: QualityScore[];
    states?: Partial<NodeState>[];
    options?: Partial<RoutingOptions>;
  } = {},
): { snapshot: RoutingSnapshot; live: LiveTable } {
  const snapshot = buildSnapshot(
    { nodes, costs: extra.costs ?? [], quality: extra.quality ?? [] },
    extra.options,
  );
  const live = createLiveTable(snapshot);
  nodes.forEach((n, i) => {
    live.applyState(state(n.id, extra.states?.[i] ?? {}));
    if (n.tier >= 3) live.setAttestedUntil(n.id, NOW + 60_000);
  });
  return { snapshot, live };
}

/** mulberry32: a small seeded PRNG so jittered decisions are reproducible. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
