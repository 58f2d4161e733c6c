import { describe, expect, it } from "vitest";
import {
  buildSnapshot,
  createLiveTable,
  decide,
  RoutingError,
  type Decision,
  type Rejection,
} from "../src/index.ts";
import { fleet, MODEL, node, NOW, onPrem, policy, quality, seeded, state } from "./fixtures.ts";

function ok(result: Decision | Rejection): Decision {
  if (!result.ok) throw new Error(`expected a decision, got ${result.reason}: ${result.detail}`);
  return result;
}
function rejected(result: Decision | Rejection): Rejection {
  if (result.ok) throw new Error(`expected a rejection, got ${result.candidates[0]!.node.id}`);
  return result;
}
const ids = (d: Decision) => d.candidates.map((c) => c.node.id);
const reasonOf = (d: Decision | Rejection, id: string) =>
  d.passedOver.find((p) => p.nodeId === id)?.reason;

describe("availability", () => {
  it("passes over every unusable node with its reason and keeps the usable one", () => {
    const nodes = [
      node("ok"),
      node("degraded"),
      node("probing"),
      node("unpolled"),
      node("cooling"),
      node("full", { max_concurrency: 4 }),
      node("failed"),
    ];
    const { snapshot, live } = fleet(nodes, {
      states: [{}, { status: "Degraded" }, { probe_pending: true }, {}, {}, { queue_depth: 4 }],
    });
    live.clearState("unpolled");
    live.coolDown("cooling", NOW + 1);
    const d = ok(
      decide(
        snapshot,
        live,
        { model: MODEL, tier: 1, exclude: new Set(["failed"]) },
        policy(),
        NOW,
      ),
    );
    expect(ids(d)).toEqual(["ok"]);
    expect(Object.fromEntries(d.passedOver.map((p) => [p.nodeId, p.reason]))).toEqual({
      degraded: "not_active",
      probing: "not_active",
      unpolled: "no_state",
      cooling: "cooling_down",
      full: "at_capacity",
      failed: "excluded",
    });
  });

  it("considers only nodes that serve the request's API, chat when it names none", () => {
    const nodes = [
      node("chat-only"),
      node("embedder", { apis: ["embeddings"] }),
      node("both", { apis: ["chat", "responses"] }),
    ];
    const { snapshot, live } = fleet(nodes);
    const route = (api?: "chat" | "responses" | "embeddings") =>
      decide(snapshot, live, { model: MODEL, tier: 1, api }, policy(), NOW);
    expect(ids(ok(route()))).toEqual(["chat-only", "both"]);
    expect(ids(ok(route("responses")))).toEqual(["both"]);
    const embeddings = ok(route("embeddings"));
    expect(ids(embeddings)).toEqual(["embedder"]);
    // Nodes of another API are not candidates at all, so they are not "passed over" either.
    expect(embeddings.passedOver).toEqual([]);
  });

  it("rejects with api_not_served when the model's nodes serve only other APIs", () => {
    const { snapshot, live } = fleet([node("chat-only")], { states: [{ status: "Degraded" }] });
    const r = rejected(
      decide(snapshot, live, { model: MODEL, tier: 1, api: "embeddings" }, policy(), NOW),
    );
    expect(r).toMatchObject({ reason: "api_not_served", code: "api_not_served", queueForMs: 0 });
    expect(r.retryAfterS).toBeUndefined();
    expect(r.detail).toContain("embeddings API");
    // A node of the API that is merely down is the usual 503 (no usable node), not a refusal.
    const both = fleet([node("a", { apis: ["embeddings"] })], { states: [{ status: "Degraded" }] });
    const down = rejected(
      decide(both.snapshot, both.live, { model: MODEL, tier: 1, api: "embeddings" }, policy(), NOW),
    );
    expect(down.reason).toBe("no_usable_node");
  });

  it("counts requests dispatched since the last poll towards capacity", () => {
    const { snapshot, live } = fleet([node("a", { max_concurrency: 2 })], {
      states: [{ queue_depth: 1 }],
    });
    expect(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW).ok).toBe(true);
    live.dispatched("a");
    const r = rejected(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW));
    expect(r.reason).toBe("saturated");
    expect(reasonOf(r, "a")).toBe("at_capacity");
  });

  it("a cooldown ends at its deadline", () => {
    const { snapshot, live } = fleet([node("a")]);
    live.coolDown("a", NOW + 5000);
    expect(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW + 4999).ok).toBe(false);
    expect(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW + 5000).ok).toBe(true);
  });

  it("requires a valid attestation at tier 3 and 4 but not below", () => {
    const nodes = [
      node("t3", { tier: 3 }),
      node("t3-expired", { tier: 3 }),
      node("t4-none", { tier: 4 }),
      node("t2", { tier: 2 }),
    ];
    const { snapshot, live } = fleet(nodes);
    live.setAttestedUntil("t3-expired", NOW);
    live.setAttestedUntil("t4-none", 0);
    const t3 = ok(decide(snapshot, live, { model: MODEL, tier: 3 }, policy(), NOW));
    expect(ids(t3)).toEqual(["t3"]);
    expect(reasonOf(t3, "t3-expired")).toBe("not_attested");
    const t4 = rejected(decide(snapshot, live, { model: MODEL, tier: 4 }, policy(), NOW));
    expect(t4).toMatchObject({ reason: "no_usable_node", code: "no_usable_node" });
    expect(t4.saturation).toMatchObject({ considered: 1, unattested: 1 });
    expect(reasonOf(t4, "t4-none")).toBe("not_attested");
    expect(
      ok(decide(snapshot, live, { model: MODEL, tier: 2 }, policy(), NOW)).candidates[0]!.node.id,
    ).toBe("t2");
  });

  it("a tier-3 request never gets a tier-1 node, even when tier 3 has nothing usable", () => {
    const { snapshot, live } = fleet([node("cheap-t1"), node("t3", { tier: 3 })], {
      states: [{}, { status: "Isolated" }],
    });
    const r = rejected(decide(snapshot, live, { model: MODEL, tier: 3 }, policy(), NOW));
    expect(r.reason).toBe("no_usable_node");
    expect(r.passedOver.map((p) => p.nodeId)).toEqual(["t3"]);
  });

  it("only considers the policy's families", () => {
    const { snapshot, live } = fleet([node("a100", { accelerator_family: "A100" })]);
    const r = rejected(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW));
    expect(r.reason).toBe("no_node_for_model_tier");
    expect(r.detail).toContain("H100, MI300X");
  });
});

describe("rejections", () => {
  it("rejects an unknown model without Retry-After", () => {
    const { snapshot, live } = fleet([node("a")]);
    const r = rejected(decide(snapshot, live, { model: "nope", tier: 1 }, policy(), NOW));
    expect(r).toMatchObject({ reason: "unknown_model", code: "unknown_model" });
    expect(r.retryAfterS).toBeUndefined();
  });

  it("a registered model with no node at the tier is 'no node', not unknown", () => {
    const snapshot = buildSnapshot({ nodes: [node("a")], models: [{ id: "other" }] });
    const live = createLiveTable(snapshot);
    expect(
      rejected(decide(snapshot, live, { model: "other", tier: 1 }, policy(), NOW)),
    ).toMatchObject({
      reason: "no_node_for_model_tier",
      code: "no_node_available",
      retryAfterS: 5,
    });
    expect(
      rejected(decide(snapshot, live, { model: MODEL, tier: 2 }, policy(), NOW)).detail,
    ).toContain("served at tier 1");
  });

  it("saturation says when to come back and how long the policy lets it queue", () => {
    const { snapshot, live } = fleet([node("a"), node("b", { max_concurrency: 2 })], {
      states: [{}, { queue_depth: 2 }],
    });
    live.coolDown("a", NOW + 12_300);
    const queueing = policy({ queue_on_saturation: true, max_queue_ms: 2000 });
    const r = rejected(decide(snapshot, live, { model: MODEL, tier: 1 }, queueing, NOW));
    expect(r).toMatchObject({ reason: "saturated", code: "saturated", queueForMs: 2000 });
    expect(r.saturation).toEqual({
      considered: 2,
      full: 1,
      cooling: 1,
      inactive: 0,
      unattested: 0,
      failed: 0,
    });
    // b frees a slot after one request: 256 tokens at 1000 tok/s, rounded up to 1 s.
    expect(r.retryAfterS).toBe(1);
    live.applyState(state("b", { queue_depth: 0, status: "Degraded" }));
    const cooling = rejected(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW));
    expect(cooling).toMatchObject({ reason: "saturated", retryAfterS: 13, queueForMs: 0 });
  });

  it("all nodes inactive is 'no usable node', not saturation nor 'no node'", () => {
    const { snapshot, live } = fleet([node("a"), node("b")], {
      states: [{ status: "Degraded" }, { status: "Isolated" }],
    });
    const r = rejected(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW));
    expect(r).toMatchObject({ reason: "no_usable_node", code: "no_usable_node", retryAfterS: 5 });
    expect(r.saturation).toMatchObject({ considered: 2, inactive: 2, full: 0, cooling: 0 });
  });

  it("refuses a live table of another snapshot", () => {
    const { snapshot } = fleet([node("a")]);
    const other = fleet([node("a")]);
    expect(() => decide(snapshot, other.live, { model: MODEL, tier: 1 }, policy(), NOW)).toThrow(
      RoutingError,
    );
  });
});

describe("ranking inside a family", () => {
  it("orders by queue depth over tokens per second, lowest first", () => {
    const nodes = [node("a"), node("b"), node("c")];
    const { snapshot, live } = fleet(nodes, {
      states: [
        { queue_depth: 4, tokens_per_second: 1000 },
        { queue_depth: 1, tokens_per_second: 200 },
        { queue_depth: 8, tokens_per_second: 4000 },
      ],
    });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "latency" }), NOW),
    );
    expect(ids(d)).toEqual(["c", "a", "b"]);
    expect(d.candidates[0]).toMatchObject({ queueDepth: 8, responseMs: (9 * 256 * 1000) / 4000 });
  });

  it("recent latency observations bias towards the faster node", () => {
    const { snapshot, live } = fleet([node("slow"), node("fast")], {
      states: [{ latency_ewma_ms: 3000 }, { latency_ewma_ms: 100 }],
    });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "latency" }), NOW),
    );
    expect(ids(d)).toEqual(["fast", "slow"]);
    expect(d.candidates[0]!.responseMs).toBeCloseTo(0.7 * 256 + 0.3 * 100);
    // The dispatcher's own observations move the estimate between polls.
    for (let i = 0; i < 30; i++) live.observeLatency("fast", 20_000);
    expect(
      ids(
        ok(
          decide(
            snapshot,
            live,
            { model: MODEL, tier: 1 },
            policy({ cost_priority: "latency" }),
            NOW,
          ),
        ),
      )[0],
    ).toBe("slow");
  });

  it("spreads load: requests dispatched since the poll push the next decision elsewhere", () => {
    const { snapshot, live } = fleet([node("a"), node("b")]);
    const pol = policy({ cost_priority: "latency" });
    const first = ok(decide(snapshot, live, { model: MODEL, tier: 1 }, pol, NOW)).candidates[0]!
      .node.id;
    live.dispatched(first);
    const second = ok(decide(snapshot, live, { model: MODEL, tier: 1 }, pol, NOW)).candidates[0]!
      .node.id;
    expect(second).not.toBe(first);
  });

  it("breaks near-ties at random, reproducibly under a seeded source", () => {
    const { snapshot, live } = fleet([node("a"), node("b"), node("c")]);
    const pol = policy({ cost_priority: "latency" });
    const pick = (random: () => number) =>
      ok(decide(snapshot, live, { model: MODEL, tier: 1, random }, pol, NOW)).candidates[0]!.node
        .id;
    const chosen = new Set<string>();
    const r1 = seeded(7);
    const r2 = seeded(7);
    for (let i = 0; i < 60; i++) {
      const id = pick(r1);
      expect(pick(r2)).toBe(id);
      chosen.add(id);
    }
    expect(chosen).toEqual(new Set(["a", "b", "c"]));
    // Without a random source the order is the registration order.
    expect(ids(ok(decide(snapshot, live, { model: MODEL, tier: 1 }, pol, NOW)))).toEqual([
      "a",
      "b",
      "c",
    ]);
  });
});

describe("latency policy", () => {
  const nodes = [node("h100"), node("mi300x", { accelerator_family: "MI300X" })];
  const costs = [onPrem({ family: "H100" }, 10), onPrem({ family: "MI300X" }, 0.5)];

  it("takes the first family in the chain with acceptable queue depth, ignoring cost", () => {
    const { snapshot, live } = fleet(nodes, { costs, states: [{ queue_depth: 10 }, {}] });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "latency" }), NOW),
    );
    expect(ids(d)).toEqual(["h100", "mi300x"]);
    expect(d.ranking).toBe("latency");
  });

  it("moves on to the next family when the first one would miss the latency target", () => {
    const busy = [node("h100", { max_concurrency: 64 }), nodes[1]!];
    // 26 requests of 256 tokens at 1000 tok/s: 6.7 s against a 5 s target.
    const { snapshot, live } = fleet(busy, { costs, states: [{ queue_depth: 25 }, {}] });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "latency" }), NOW),
    );
    expect(ids(d)).toEqual(["mi300x", "h100"]);
    expect(d.candidates[1]!.withinLatencyTarget).toBe(false);
  });

  it("the accelerator hint puts its family first; a hint outside the chain is ignored", () => {
    const { snapshot, live } = fleet(nodes, { costs });
    const pol = policy({ cost_priority: "latency" });
    const hinted = ok(
      decide(snapshot, live, { model: MODEL, tier: 1, acceleratorHint: "MI300X" }, pol, NOW),
    );
    expect(ids(hinted)[0]).toBe("mi300x");
    expect(hinted.hintApplied).toBe(true);
    const foreign = ok(
      decide(snapshot, live, { model: MODEL, tier: 1, acceleratorHint: "TPU" }, pol, NOW),
    );
    expect(ids(foreign)[0]).toBe("h100");
    expect(foreign.hintApplied).toBe(false);
  });

  it("follows the priorities, not the list order, of the preference chain", () => {
    const { snapshot, live } = fleet(nodes);
    const pol = policy({
      cost_priority: "latency",
      accelerator_preference: [
        { family: "H100", priority: 5 },
        { family: "MI300X", priority: 1 },
      ],
    });
    expect(ids(ok(decide(snapshot, live, { model: MODEL, tier: 1 }, pol, NOW)))[0]).toBe("mi300x");
  });
});

describe("cost and balanced policies", () => {
  it("cost picks the cheapest node that meets the latency target", () => {
    const nodes = [node("h100"), node("mi300x", { accelerator_family: "MI300X" })];
    const costs = [onPrem({ family: "H100" }, 4), onPrem({ family: "MI300X" }, 2)];
    const { snapshot, live } = fleet(nodes, { costs });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "cost" }), NOW),
    );
    expect(ids(d)).toEqual(["mi300x", "h100"]);
    expect(d.estimates.costUsd).toBeCloseTo((2 * 256) / 1000 / 3600);
  });

  it("the cheaper node over the latency target loses", () => {
    const nodes = [
      node("cheap-slow", { accelerator_family: "MI300X", max_concurrency: 64 }),
      node("dear-fast"),
      node("dear-faster"),
    ];
    const costs = [onPrem({ family: "H100" }, 4), onPrem({ family: "MI300X" }, 1)];
    for (const costPriority of ["cost", "balanced"] as const) {
      const { snapshot, live } = fleet(nodes, {
        costs,
        states: [{ queue_depth: 25 }, { queue_depth: 1 }, {}],
        options: { maxCandidates: 2 },
      });
      const d = ok(
        decide(
          snapshot,
          live,
          { model: MODEL, tier: 1 },
          policy({ cost_priority: costPriority }),
          NOW,
        ),
      );
      expect(ids(d)).toEqual(["dear-faster", "dear-fast"]);
      expect(reasonOf(d, "cheap-slow")).toBe("over_latency_target");
      expect(d.latencyTargetMet).toBe(true);
    }
  });

  it("does not judge an idle, never-measured node slow: the chain order decides", () => {
    // A new MI300X node (no throughput, no latency yet) first in the chain, and an H100 node
    // already measured fast: the new family still gets the traffic the policy gives it.
    const nodes = [node("new-mi300x", { accelerator_family: "MI300X" }), node("known-h100")];
    const { snapshot, live } = fleet(nodes, {
      states: [{ tokens_per_second: null }, { tokens_per_second: 5_000 }],
    });
    live.observeLatency("known-h100", 50);
    const chain = policy({
      cost_priority: "latency",
      latency_target_ms: 2_000,
      accelerator_preference: [
        { family: "MI300X", priority: 1 },
        { family: "H100", priority: 2 },
      ],
    });
    expect(ids(ok(decide(snapshot, live, { model: MODEL, tier: 1 }, chain, NOW)))[0]).toBe(
      "new-mi300x",
    );
    // Once it has a queue, the default guess applies again and it is over the target.
    live.dispatched("new-mi300x");
    const busy = ok(decide(snapshot, live, { model: MODEL, tier: 1 }, chain, NOW));
    expect(ids(busy)[0]).toBe("known-h100");
  });

  it("when every node misses the target it takes the fastest and says so", () => {
    const { snapshot, live } = fleet([node("a"), node("b")], {
      costs: [onPrem({ node_id: "a" }, 1), onPrem({ node_id: "b" }, 9)],
      states: [{ queue_depth: 14 }, { queue_depth: 12 }],
    });
    const d = ok(
      decide(
        snapshot,
        live,
        { model: MODEL, tier: 1 },
        policy({ cost_priority: "cost", latency_target_ms: 100 }),
        NOW,
      ),
    );
    expect(ids(d)).toEqual(["b", "a"]);
    expect(d.latencyTargetMet).toBe(false);
  });

  it("balanced ranks by cost × response time: twice the price needs twice the speed", () => {
    const nodes = [node("dear"), node("cheap")];
    const costs = [onPrem({ node_id: "dear" }, 4), onPrem({ node_id: "cheap" }, 1)];
    const pol = policy({ cost_priority: "balanced" });
    // dear: 4 × 256 ms; cheap, one request queued: 1 × 512 ms.
    const a = fleet(nodes, { costs, states: [{}, { queue_depth: 1 }] });
    expect(ids(ok(decide(a.snapshot, a.live, { model: MODEL, tier: 1 }, pol, NOW)))[0]).toBe(
      "cheap",
    );
    // cheap with seven queued: 1 × 2048 ms > 4 × 256 ms.
    const b = fleet(nodes, { costs, states: [{}, { queue_depth: 7 }] });
    expect(ids(ok(decide(b.snapshot, b.live, { model: MODEL, tier: 1 }, pol, NOW)))[0]).toBe(
      "dear",
    );
  });

  it("an unpriced node is ranked as the most expensive priced one and reports no cost", () => {
    const { snapshot, live } = fleet([node("unpriced"), node("priced")], {
      costs: [onPrem({ node_id: "priced" }, 3)],
    });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1 }, policy({ cost_priority: "cost" }), NOW),
    );
    // Equal effective price: registration order decides.
    expect(ids(d)).toEqual(["unpriced", "priced"]);
    expect(d.candidates[0]!.costUsd).toBeNull();
    expect(d.candidates[1]!.costUsd).toBeCloseTo((3 * 256) / 1000 / 3600);
  });

  it("provider.sort = price ranks by cost whatever the policy", () => {
    const { snapshot, live } = fleet([node("dear"), node("cheap")], {
      costs: [onPrem({ node_id: "dear" }, 4), onPrem({ node_id: "cheap" }, 1)],
    });
    const d = ok(
      decide(
        snapshot,
        live,
        { model: MODEL, tier: 1, sort: "price" },
        policy({ cost_priority: "latency" }),
        NOW,
      ),
    );
    expect(d.ranking).toBe("cost");
    expect(ids(d)[0]).toBe("cheap");
  });
});

describe("quality routing", () => {
  const nodes = [node("good"), node("better")];
  const costs = [onPrem({ node_id: "good" }, 1), onPrem({ node_id: "better" }, 5)];

  it("fresh third-party scores rank candidates, best first", () => {
    const { snapshot, live } = fleet(nodes, {
      costs,
      quality: [quality({ node_id: "good" }, 70), quality({ node_id: "better" }, 90, NOW - 60_000)],
    });
    const d = ok(decide(snapshot, live, { model: MODEL, tier: 1, sort: "quality" }, policy(), NOW));
    expect(ids(d)).toEqual(["better", "good"]);
    expect(d.candidates[0]!.quality).toBe(90);
    expect(d.qualityFresh).toBe(true);
  });

  it("stale scores degrade to health and price, and never block", () => {
    const staleAt = NOW - 6 * 60 * 60 * 1000 - 1;
    const { snapshot, live } = fleet(nodes, {
      costs,
      quality: [quality({ node_id: "better" }, 99, staleAt)],
      states: [{ health_score: 100 }, { health_score: 100 }],
    });
    const d = ok(decide(snapshot, live, { model: MODEL, tier: 1, sort: "quality" }, policy(), NOW));
    expect(ids(d)).toEqual(["good", "better"]);
    expect(d.qualityFresh).toBe(false);
    expect(d.candidates[1]!.quality).toBeNull();
    // At equal price, the healthier node wins.
    const even = fleet(nodes, {
      costs: [onPrem({ family: "H100" }, 1)],
      states: [{ health_score: 40 }, { health_score: 95 }],
    });
    expect(
      ids(
        ok(
          decide(
            even.snapshot,
            even.live,
            { model: MODEL, tier: 1, sort: "quality" },
            policy(),
            NOW,
          ),
        ),
      )[0],
    ).toBe("better");
  });

  it("family-wide scores apply to every node of the family", () => {
    const { snapshot, live } = fleet([node("h"), node("m", { accelerator_family: "MI300X" })], {
      quality: [quality({ family: "MI300X" }, 80), quality({ family: "H100" }, 60)],
    });
    const d = ok(decide(snapshot, live, { model: MODEL, tier: 1, sort: "quality" }, policy(), NOW));
    expect(ids(d)).toEqual(["m", "h"]);
  });
});

describe("the decision record", () => {
  it("lists at most maxCandidates and explains the rest", () => {
    const nodes = ["a", "b", "c", "d", "e"].map((id) => node(id));
    const { snapshot, live } = fleet(nodes);
    const d = ok(decide(snapshot, live, { model: MODEL, tier: 1 }, policy(), NOW));
    expect(d.candidates).toHaveLength(3);
    expect(d.viable).toBe(5);
    expect(d.passedOver).toEqual([
      { nodeId: "d", family: "H100", reason: "ranked_lower" },
      { nodeId: "e", family: "H100", reason: "ranked_lower" },
    ]);
    const json = JSON.parse(JSON.stringify(d)) as Record<string, unknown>;
    expect(json).toMatchObject({ ok: true, policy: "test", viable: 5, model: MODEL, tier: 1 });
    expect(json.passedOver).toHaveLength(2);
  });

  it("judges a request over the latency target by its max_tokens", () => {
    // One node at 1000 tok/s against a 1 s target: 16 tokens take 16 ms, 4000 take 4 s.
    const { snapshot, live } = fleet([node("a")]);
    const tight = policy({ latency_target_ms: 1000 });
    const judged = (maxTokens: number) =>
      ok(decide(snapshot, live, { model: MODEL, tier: 1, expectedTokens: maxTokens }, tight, NOW));
    const short = judged(16);
    expect(short.latencyTargetMet).toBe(true);
    expect(short.candidates[0]).toMatchObject({ responseMs: 16, withinLatencyTarget: true });
    const long = judged(4000);
    expect(long.latencyTargetMet).toBe(false);
    expect(long.candidates[0]).toMatchObject({ responseMs: 4000, withinLatencyTarget: false });
  });

  it("uses the request's expected tokens for the estimates", () => {
    const { snapshot, live } = fleet([node("a")], { costs: [onPrem({ node_id: "a" }, 3.6)] });
    const d = ok(
      decide(snapshot, live, { model: MODEL, tier: 1, expectedTokens: 1000 }, policy(), NOW),
    );
    expect(d.estimates.responseMs).toBe(1000);
    expect(d.estimates.costUsd).toBeCloseTo(0.001);
  });
});
