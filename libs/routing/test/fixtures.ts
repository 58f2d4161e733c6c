import type { NodeSpec, NodeState, PolicySpec } from "@zml/contracts";
import { activeNodeState, chainPolicy, nodeSpec } from "@zml/contracts/testing";
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
  return nodeSpec(id, { models: [MODEL], ...overrides });
}

/** Active and idle at {@link NOW}, at 1000 tok/s. */
export function state(nodeId: string, overrides: Partial<NodeState> = {}): NodeState {
  return activeNodeState(nodeId, NOW, { tokens_per_second: 1000, ...overrides });
}

export function policySpec(overrides: Partial<PolicySpec> = {}): PolicySpec {
  return chainPolicy("test", ["H100", "MI300X"], {
    latency_target_ms: 5000,
    cost_priority: "balanced",
    ...overrides,
  });
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
