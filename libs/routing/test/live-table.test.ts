import { describe, expect, it } from "vitest";
import { buildSnapshot, createLiveTable, LIVE_STATUS } from "../src/index.ts";
import { GATE } from "../src/live-table.ts";
import { node, state } from "./fixtures.ts";

describe("live table", () => {
  const snapshot = buildSnapshot({ nodes: [node("a"), node("b")] });

  it("starts with no state and ignores nodes it does not know", () => {
    const live = createLiveTable(snapshot);
    expect(live.status[0]).toBe(LIVE_STATUS.unknown);
    expect(live.applyState(state("ghost"))).toBe(false);
    expect(live.dispatched("ghost")).toBe(false);
    expect(live.queueDepth("ghost")).toBeUndefined();
  });

  it("only an Active node with no probe pending is usable", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("a", { probe_pending: true }));
    expect(live.status[0]).toBe(LIVE_STATUS.inactive);
    live.applyState(state("a"));
    expect(live.status[0]).toBe(LIVE_STATUS.active);
  });

  it("adds requests sent since the last poll to the polled depth, without double counting", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("a", { queue_depth: 3 }));
    live.dispatched("a");
    live.dispatched("a");
    expect(live.queueDepth("a")).toBe(5);
    // The next poll sees both requests; they are not added again.
    live.applyState(state("a", { queue_depth: 5 }));
    expect(live.queueDepth("a")).toBe(5);
    live.dispatched("a");
    expect(live.queueDepth("a")).toBe(6);
    // A request ends: the node has a free slot now, not at the next poll.
    live.completed("a");
    expect(live.queueDepth("a")).toBe(5);
    live.completed("a");
    live.completed("a");
    // Ours are all done; the 3 the first poll saw from elsewhere are still there.
    expect(live.queueDepth("a")).toBe(3);
    expect(live.inFlight[0]).toBe(0);
    live.completed("a");
    expect(live.inFlight[0]).toBe(0);
    expect(live.queueDepth("a")).toBe(3);
  });

  it("a node that finished its only request is free at once (no phantom saturation)", () => {
    const live = createLiveTable(snapshot);
    live.dispatched("a");
    // The poll saw the request running.
    live.applyState(state("a", { queue_depth: 1 }));
    expect(live.queueDepth("a")).toBe(1);
    live.completed("a");
    expect(live.queueDepth("a")).toBe(0);
  });

  it("a poll taken before a completion but arriving after it does not fill the node again", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("a", { queue_depth: 0, checked_at: 1_000 }));
    live.dispatched("a");
    live.completed("a", 2_000);
    // The probe ran while the request was running; its answer lands after the end.
    live.applyState(state("a", { queue_depth: 1, checked_at: 1_990 }));
    expect(live.queueDepth("a")).toBe(0);
    // A peer's completion alike.
    live.setPeerInFlight(new Map([["a", 1]]), 2, true, 3_000);
    live.setPeerInFlight(new Map(), 2, true, 3_010);
    live.applyState(state("a", { queue_depth: 1, checked_at: 2_950 }));
    expect(live.queueDepth("a")).toBe(0);
    // A probe after the last completion: the depth it reports is load from elsewhere.
    live.applyState(state("a", { queue_depth: 1, checked_at: 4_100 }));
    expect(live.queueDepth("a")).toBe(1);
  });

  it("counts what the peer replicas have in flight, before and after a poll", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("a", { queue_depth: 0 }));
    live.dispatched("a");
    live.setPeerInFlight(
      new Map([
        ["a", 2],
        ["ghost", 9],
      ]),
      2,
      true,
    );
    expect(live.queueDepth("a")).toBe(3);
    expect(live.queueDepth("b")).toBe(0);
    // The poll sees all three; a peer's completion frees its slot at once.
    live.applyState(state("a", { queue_depth: 3 }));
    expect(live.queueDepth("a")).toBe(3);
    live.setPeerInFlight(new Map([["a", 1]]), 2, true);
    expect(live.queueDepth("a")).toBe(2);
    // A peer that is forgotten takes its requests with it.
    live.setPeerInFlight(new Map(), 1, true);
    expect(live.queueDepth("a")).toBe(1);
  });

  it("a burst allowance is this replica's share of the free slots until peers are heard", () => {
    const limited = buildSnapshot({ nodes: [node("a", { max_concurrency: 5 })] });
    const live = createLiveTable(limited);
    expect(live.burstAllowance[0]).toBe(Infinity);
    live.applyState(state("a", { queue_depth: 0 }));
    live.setPeerInFlight(new Map(), 2, true);
    expect(live.burstAllowance[0]).toBe(3);
    live.dispatched("a");
    live.dispatched("a");
    expect(live.burstAllowance[0]).toBe(1);
    // Our own completion is a slot no peer counted on.
    live.completed("a");
    expect(live.burstAllowance[0]).toBe(2);
    live.setPeerInFlight(new Map([["a", 4]]), 2, true);
    expect(live.burstAllowance[0]).toBe(0);
    // A view the peers built before seeing our latest count can only shrink a share.
    live.completed("a");
    live.setPeerInFlight(new Map([["a", 1]]), 2, false);
    expect(live.burstAllowance[0]).toBe(1);
    live.setPeerInFlight(new Map([["a", 1]]), 2, true);
    expect(live.burstAllowance[0]).toBe(2);
    // Alone again: no share to respect.
    live.setPeerInFlight(new Map(), 1, true);
    expect(live.burstAllowance[0]).toBe(Infinity);
  });

  it("takes throughput and latency history from the state, keeping its own when absent", () => {
    const live = createLiveTable(snapshot);
    live.applyState(
      state("a", { tokens_per_second: 1500, latency_ewma_ms: 800, instance_id: "i-1" }),
    );
    live.observeLatency("a", 1800);
    expect(live.latencyEwmaMs[0]).toBeCloseTo(800 + 0.2 * 1000);
    live.applyState(
      state("a", { tokens_per_second: null, latency_ewma_ms: null, instance_id: "i-1" }),
    );
    expect(live.tokensPerSecond[0]).toBe(1500);
    // A restarted node inherits no history.
    live.applyState(
      state("a", { tokens_per_second: null, latency_ewma_ms: null, instance_id: "i-2" }),
    );
    expect(live.tokensPerSecond[0]).toBeNaN();
    expect(live.latencyEwmaMs[0]).toBeNaN();
  });

  it("a cooldown only ever extends; an attestation can be revoked", () => {
    const live = createLiveTable(snapshot);
    live.coolDown("a", 2000);
    live.coolDown("a", 1000);
    expect(live.cooldownUntil[0]).toBe(2000);
    live.setAttestedUntil("a", 5000);
    live.setAttestedUntil("a", 0);
    expect(live.attestedUntil[0]).toBe(0);
  });

  it("rebinding to a new snapshot carries values over by node id", () => {
    const live = createLiveTable(snapshot);
    live.applyState(state("b", { queue_depth: 7, instance_id: "i-b" }));
    live.coolDown("b", 1234);
    const next = buildSnapshot({
      nodes: [node("c", { registered_at: 0 }), node("b", { registered_at: 1 })],
    });
    live.rebind(next);
    expect(live.snapshot).toBe(next);
    expect(live.queueDepth("b")).toBe(7);
    expect(live.cooldownUntil[1]).toBe(1234);
    expect(live.status[0]).toBe(LIVE_STATUS.unknown);
    expect(live.queueDepth("a")).toBeUndefined();
  });

  it("a node added by a rebind starts at this replica's share, not unlimited, once it has peers", () => {
    const live = createLiveTable(buildSnapshot({ nodes: [node("a", { max_concurrency: 4 })] }));
    live.setPeerInFlight(new Map(), 2, true);
    live.rebind(
      buildSnapshot({
        nodes: [node("a", { max_concurrency: 4 }), node("b", { max_concurrency: 5 })],
      }),
    );
    live.applyState(state("b", { queue_depth: 0 }));
    // Its peer may be filling it from the same moment: each takes ceil(5 / 2) before they talk.
    expect(live.burstAllowance[1]).toBe(3);
    for (let k = 0; k < 3; k++) live.dispatched("b");
    expect(live.gate[1]).toBe(GATE.full);
    // Alone, a new node is unlimited as before.
    const alone = createLiveTable(buildSnapshot({ nodes: [node("a")] }));
    alone.rebind(buildSnapshot({ nodes: [node("a"), node("b")] }));
    expect(alone.burstAllowance[1]).toBe(Infinity);
  });
});
