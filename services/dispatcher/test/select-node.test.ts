import type { NodeSpec, NodeState } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createFleetView } from "../src/fleet-view.ts";
import { selectNodes } from "../src/select-node.ts";

function node(id: string, extra: Partial<NodeSpec> = {}): NodeSpec {
  return {
    id,
    endpoint: `http://127.0.0.1/${id}`,
    framework: "vllm",
    accelerator_family: "H100",
    tier: 1,
    models: ["m"],
    max_concurrency: 2,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: 0,
    ...extra,
  };
}

function state(id: string, extra: Partial<NodeState> = {}): NodeState {
  return {
    type: "node.state.v1",
    node_id: id,
    status: "Active",
    probe_pending: false,
    queue_depth: 0,
    running: 0,
    waiting: 0,
    kv_cache_usage: null,
    health_score: 100,
    consecutive_failures: 0,
    last_error: null,
    checked_at: 0,
    last_ok_at: 0,
    free_memory_gib: null,
    last_inference_at: null,
    tokens_per_second: null,
    latency_ewma_ms: null,
    ttft_ewma_ms: null,
    instance_id: null,
    ...extra,
  };
}

function view(nodes: NodeSpec[], states: NodeState[]) {
  return createFleetView({
    nodes: new Map(nodes.map((n) => [n.id, n])),
    states: new Map(states.map((s) => [s.node_id, s])),
    policies: new Map(),
  });
}

const req = (extra: Partial<{ model: string; tier: number; exclude: Set<string> }> = {}) => ({
  model: "m",
  tier: 1,
  exclude: new Set<string>(),
  ...extra,
});

describe("selectNodes", () => {
  it("ranks Active nodes of the tier by queue depth plus own in-flight", () => {
    const v = view([node("a"), node("b"), node("c")], [state("a", { queue_depth: 1 }), state("b"), state("c")]);
    v.acquire("b");
    const sel = selectNodes(v, req(), 0, () => 0.5);
    expect(sel.ok && sel.candidates.map((c) => [c.node.id, c.queueDepth])).toEqual([
      ["c", 0],
      ["a", 1],
      ["b", 1],
    ]);
  });

  it("never returns a node of another tier, another model, or not Active", () => {
    const v = view(
      [node("t3", { tier: 3 }), node("other", { models: ["x"] }), node("deg"), node("iso"), node("nostate")],
      [state("t3"), state("other"), state("deg", { status: "Degraded" }), state("iso", { status: "Isolated" })],
    );
    expect(selectNodes(v, req(), 0, Math.random)).toEqual({ ok: false, reason: "no_node_available" });
  });

  it("says saturated when servable nodes are all full, cooling down or excluded", () => {
    const v = view([node("a"), node("b"), node("c")], [state("a"), state("b"), state("c")]);
    v.acquire("a");
    v.acquire("a");
    v.coolDown("b", 1_000);
    expect(selectNodes(v, req({ exclude: new Set(["c"]) }), 500, Math.random)).toEqual({
      ok: false,
      reason: "saturated",
    });
    // After the cooldown, b is back.
    const sel = selectNodes(v, req({ exclude: new Set(["c"]) }), 1_000, Math.random);
    expect(sel.ok && sel.candidates.map((c) => c.node.id)).toEqual(["b"]);
  });

  it("never shortens a cooldown and releases in-flight slots", () => {
    const v = view([node("a")], [state("a")]);
    v.coolDown("a", 5_000);
    v.coolDown("a", 1_000);
    expect(v.cooldownUntil("a")).toBe(5_000);
    v.acquire("a");
    v.release("a");
    expect(v.inFlight("a")).toBe(0);
  });

  it("breaks ties at random so replicas spread load", () => {
    const v = view([node("a"), node("b")], [state("a"), state("b")]);
    const firsts = new Set<string>();
    for (const r of [0.1, 0.9]) {
      let calls = 0;
      const sel = selectNodes(v, req(), 0, () => (calls++ === 0 ? r : 1 - r));
      if (sel.ok) firsts.add(sel.candidates[0]!.node.id);
    }
    expect(firsts).toEqual(new Set(["a", "b"]));
  });
});
