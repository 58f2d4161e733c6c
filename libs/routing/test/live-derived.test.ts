// The live table's derived arrays (depth, gate, rate), which decide() reads instead of the
// raw state: every mutator that changes an input must leave them as a fresh derivation.
import { describe, expect, it } from "vitest";
import { buildSnapshot, createLiveTable } from "../src/index.ts";
import { effectiveDepth, GATE } from "../src/live-table.ts";
import { node, state } from "./fixtures.ts";

describe("live table derived arrays", () => {
  const snapshot = buildSnapshot({
    nodes: [node("a", { max_concurrency: 2 }), node("b", { max_concurrency: 4 })],
  });

  it("gate follows state, dispatches, completions and clearing", () => {
    const live = createLiveTable(snapshot);
    expect([...live.gate]).toEqual([GATE.noState, GATE.noState]);
    live.applyState(state("a", { queue_depth: 0 }));
    expect(live.gate[0]).toBe(GATE.open);
    live.dispatched("a");
    expect(live.gate[0]).toBe(GATE.open);
    live.dispatched("a");
    expect(live.gate[0]).toBe(GATE.full);
    expect(live.depth[0]).toBe(2);
    live.completed("a");
    expect(live.gate[0]).toBe(GATE.open);
    expect(live.depth[0]).toBe(1);
    live.applyState(state("a", { status: "Degraded" }));
    expect(live.gate[0]).toBe(GATE.notActive);
    live.applyState(state("a", { probe_pending: true }));
    expect(live.gate[0]).toBe(GATE.notActive);
    live.applyState(state("a", { queue_depth: 5 }));
    expect(live.gate[0]).toBe(GATE.full);
    live.clearState("a");
    expect(live.gate[0]).toBe(GATE.noState);
    expect(live.gate[1]).toBe(GATE.noState);
  });

  it("a peer report that leaves this replica no burst allowance closes the gate", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("b", { queue_depth: 0 }));
    // 4 slots, 3 taken by the peer: this replica's share of the one free slot is 1.
    live.setPeerInFlight(new Map([["b", 3]]), 2, true);
    expect(live.depth[1]).toBe(3);
    expect(live.gate[1]).toBe(GATE.open);
    live.dispatched("b");
    expect(live.gate[1]).toBe(GATE.full);
    live.setPeerInFlight(new Map(), 2, true);
    expect(live.depth[1]).toBe(1);
    expect(live.gate[1]).toBe(GATE.open);
  });

  it("rate is the capacity, else the served rate, else NaN", () => {
    const live = createLiveTable(snapshot);
    expect(live.rate[0]).toBeNaN();
    live.applyState(state("a", { tokens_per_second: 300, running: 0 }));
    expect(live.rate[0]).toBe(300);
    // 300 tok/s over 1 running request on a node of max_concurrency 2: capacity 600.
    live.applyState(state("a", { tokens_per_second: 300, running: 1 }));
    expect(live.rate[0]).toBe(600);
    live.setTokensPerSecond("b", 1e-9);
    expect(live.rate[1]).toBe(1e-3);
    live.setTokensPerSecond("b", Number.NaN);
    expect(live.rate[1]).toBeNaN();
    // A restarted node (new instance id) inherits no history.
    live.applyState(state("a", { tokens_per_second: null, instance_id: "one" }));
    live.applyState(state("a", { tokens_per_second: null, instance_id: "two" }));
    expect(live.rate[0]).toBeNaN();
  });

  it("a rebind re-derives every node against the new snapshot", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("a", { queue_depth: 0 }));
    live.dispatched("a");
    live.dispatched("a");
    expect(live.gate[0]).toBe(GATE.full);
    // Node "a" grows to 4 slots and moves to index 1 (registered after "c").
    const next = buildSnapshot({
      nodes: [node("c"), node("a", { max_concurrency: 4, registered_at: 1 })],
    });
    live.rebind(next);
    expect(live.gate[1]).toBe(GATE.open);
    expect(live.depth[1]).toBe(2);
    expect(live.gate[0]).toBe(GATE.noState);
    for (let i = 0; i < 2; i++) expect(live.depth[i]).toBe(effectiveDepth(live, i));
  });
});
