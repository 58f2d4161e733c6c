import { describe, expect, it } from "vitest";
import { decide, promptPrefixOf, type Decision, type RouteRequest } from "../src/index.ts";
import { fleet, MODEL, node, NOW, policy, state } from "./fixtures.ts";

/** A 2,000-token system prompt per tenant and a short user turn. */
const request = (tenant: string, turn = "hello", extra: Partial<RouteRequest> = {}) =>
  ({
    model: MODEL,
    tier: 1,
    expectedTokens: 64,
    prefix: promptPrefixOf([
      { role: "system", content: `Tenant ${tenant}. `.padEnd(8000, "Rules. ") },
      { role: "user", content: turn },
    ]),
    ...extra,
  }) satisfies RouteRequest;

const chosen = (d: ReturnType<typeof decide>) => {
  expect(d.ok).toBe(true);
  return (d as Decision).candidates[0]!;
};

describe("prefix affinity in the ranking", () => {
  // Three equal idle nodes of one family at 1,000 tok/s; prefill at 10k tok/s.
  const nodes = ["a", "b", "c"].map((id) => node(id, { prefill_tokens_per_second: 10_000 }));

  it("sends a tenant's second request to the node that served its first", () => {
    const { snapshot, live } = fleet(nodes);
    const first = chosen(decide(snapshot, live, request("acme"), policy(), NOW));
    expect(first.cachedTokens).toBe(0);
    live.recordPrefix(first.node.id, request("acme").prefix!);
    // The first is still running there, so by today's rule an idle node would take the second.
    live.dispatched(first.node.id);
    const blind = request("acme", "another question", { prefix: undefined });
    expect(chosen(decide(snapshot, live, blind, policy(), NOW)).node.id).not.toBe(first.node.id);
    const second = chosen(
      decide(snapshot, live, request("acme", "another question"), policy(), NOW),
    );
    expect(second.node.id).toBe(first.node.id);
    expect(second.cachedTokens).toBe(1984); // 31 whole blocks of 64 tokens
    // Another tenant is not drawn there: it goes by today's order.
    const other = chosen(decide(snapshot, live, request("globex"), policy(), NOW));
    expect(other.cachedTokens).toBe(0);
  });

  it("prefers the holder over an idle node until its queue costs more than the prefill saved", () => {
    const { snapshot, live } = fleet(nodes, {
      states: [{ queue_depth: 0 }, { queue_depth: 0 }, { queue_depth: 0 }],
    });
    live.recordPrefix("c", request("acme").prefix!);
    // Saved prefill: 1,984 tokens at 10k tok/s ≈ 198 ms. One queued request on c costs
    // 64 tokens at 1,000 tok/s = 64 ms (before the 0.7 model weight): c still wins.
    live.applyState(state("c", { queue_depth: 1 }));
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).toBe("c");
    // Five queued: 320 ms of queue against 198 ms of prefill. An idle node wins.
    live.applyState(state("c", { queue_depth: 5 }));
    const moved = chosen(decide(snapshot, live, request("acme"), policy(), NOW));
    expect(moved.node.id).not.toBe("c");
    expect(moved.cachedTokens).toBe(0);
  });

  it("weighs the saving by each node's own prefill speed, measured before declared", () => {
    const { snapshot, live } = fleet(nodes);
    live.recordPrefix("c", request("acme").prefix!);
    live.applyState(state("c", { queue_depth: 2 }));
    // Declared 10k tok/s: 2 queued (128 ms) < 198 ms saved: c.
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).toBe("c");
    // Measured 100k tok/s everywhere: the whole prompt prefills in 20 ms, the queue decides.
    for (const id of ["a", "b", "c"]) {
      live.applyState(
        state(id, { queue_depth: id === "c" ? 2 : 0, prefill_tokens_per_second: 100_000 }),
      );
    }
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).not.toBe("c");
  });

  it("is off with prefix_affinity: false, and never applies at tier 4", () => {
    const { snapshot, live } = fleet(nodes);
    const today = chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id;
    const holder = today === "c" ? "b" : "c";
    live.recordPrefix(holder, request("acme").prefix!);
    const off = policy({ prefix_affinity: false });
    expect(chosen(decide(snapshot, live, request("acme"), off, NOW)).node.id).toBe(today);

    const tee = ["x", "y"].map((id) => node(id, { tier: 4, prefill_tokens_per_second: 10_000 }));
    const t4 = fleet(tee);
    const t4today = chosen(
      decide(t4.snapshot, t4.live, request("acme", "q", { tier: 4 }), policy(), NOW),
    );
    t4.live.recordPrefix(t4today.node.id === "x" ? "y" : "x", request("acme").prefix!);
    const t4again = chosen(
      decide(t4.snapshot, t4.live, request("acme", "q", { tier: 4 }), policy(), NOW),
    );
    expect(t4again.node.id).toBe(t4today.node.id);
    expect(t4again.cachedTokens).toBe(0);
  });

  it("forgets what a restarted or isolated node held", () => {
    const { snapshot, live } = fleet(nodes, { states: [{}, {}, { instance_id: "c-1" }] });
    live.recordPrefix("c", request("acme").prefix!);
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).toBe("c");
    live.applyState(state("c", { instance_id: "c-2" }));
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).cachedTokens).toBe(0);
    live.recordPrefix("b", request("acme").prefix!);
    live.applyState(state("b", { status: "Isolated" }));
    live.applyState(state("b"));
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).cachedTokens).toBe(0);
  });

  it("counts the prefill a node still owes the prompts sent before (its backlog)", () => {
    const { snapshot, live } = fleet(nodes.slice(0, 2));
    const acme = request("acme").prefix!;
    live.recordPrefix("a", acme);
    live.recordPrefix("b", acme);
    // Both hold acme. b was just sent two other tenants' whole prompts to prefill (~400 ms at
    // 10k tok/s): acme's next request goes to a, whose prefill queue is empty.
    live.recordPrefix("b", request("globex").prefix!, { expectedBlocks: 0, now: NOW });
    live.recordPrefix("b", request("initech").prefix!, { expectedBlocks: 0, now: NOW });
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).toBe("a");
    // a is sent three (~600 ms): now b's shorter queue wins acme's request.
    for (const t of ["umbrella", "hooli", "wonka"]) {
      live.recordPrefix("a", request(t).prefix!, { expectedBlocks: 0, now: NOW });
    }
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW)).node.id).toBe("b");
    // Once both queues are prefilled, the two are equal again: registration order, a.
    expect(chosen(decide(snapshot, live, request("acme"), policy(), NOW + 1_000)).node.id).toBe(
      "a",
    );
  });

  it("bounds each node's index by the cache size its state reports", () => {
    const { live } = fleet(nodes);
    for (let t = 0; t < 20; t++) live.recordPrefix("a", request(`tenant-${t}`).prefix!);
    live.applyState(state("a", { kv_cache_capacity_tokens: 64 * 40 }));
    expect(live.prefixes.sizeOf("a")).toEqual({ blocks: 40, limit: 40 });
  });
});
