import { InvalidSubjectTokenError, NodeStateSchema } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_HEALTH_CONFIG,
  applyObservation,
  applyProbe,
  createNodeHealth,
  isRoutable,
  restoreNodeHealth,
  toNodeState,
  type NodeHealth,
} from "../src/index.ts";
import { FAIL, FIVE_XX, observation, ok } from "./helpers.ts";

const config = DEFAULT_HEALTH_CONFIG;
const T0 = 1_750_000_000_000;
const POLL = 5_000;
const NODE = "h100-a";

/** An Active node with throughput and latency history, as its first owner saw it. */
function seasoned(): NodeHealth {
  let h = applyProbe(
    createNodeHealth(NODE, T0),
    ok({ generationTokensTotal: 0, tokenLatency: { seconds: 0, count: 0 } }),
    config,
    T0,
  );
  h = applyProbe(
    h,
    ok({ generationTokensTotal: 1000, tokenLatency: { seconds: 4, count: 1000 } }),
    config,
    T0 + POLL,
  );
  h = applyObservation(
    h,
    observation(T0 + POLL, { latency_ms: 300, ttft_ms: 50 }),
    config,
    T0 + POLL,
  );
  return h;
}

function isolatedNode(): NodeHealth {
  return [FAIL, FAIL, FAIL].reduce(
    (h, p, i) => applyProbe(h, p, config, T0 + (i + 2) * POLL),
    seasoned(),
  );
}

/** What a second aggregator reads from the KV snapshot after the first one published. */
function snapshot(h: NodeHealth, at: number) {
  return NodeStateSchema.parse(JSON.parse(JSON.stringify(toNodeState(h, at))));
}

describe("restoreNodeHealth", () => {
  it("keeps an Active node Active with its identity, load, throughput and latency", () => {
    const before = seasoned();
    const now = T0 + 3 * POLL;
    const h = restoreNodeHealth(snapshot(before, T0 + POLL), config, now);
    expect(isRoutable(h)).toBe(true);
    expect(h).toMatchObject({
      nodeId: NODE,
      instanceId: "inst-a",
      status: "Active",
      probePending: false,
      queueDepth: before.queueDepth,
      tokensPerSecond: before.tokensPerSecond,
      requestTokensPerSecond: 250,
      latencyEwmaMs: 300,
      ttftEwmaMs: 50,
      lastInferenceOkAt: T0 + POLL,
      activeSince: now,
      isolations: 0,
    });
    expect(h.tokensPerSecond).toBeGreaterThan(0);
    // The token baseline is not in node.state: the next probe sets it and measures nothing.
    const next = applyProbe(h, ok({ generationTokensTotal: 5000 }), config, now + POLL);
    expect(next.tokensPerSecond).toBe(before.tokensPerSecond);
    expect(next.lastTokenCount).toEqual({ at: now + POLL, generationTokensTotal: 5000 });
  });

  it("puts an Isolated node on probation: one good probe readmits it", () => {
    const snap = snapshot(isolatedNode(), T0 + 4 * POLL);
    expect(snap.status).toBe("Isolated");
    const h = restoreNodeHealth(snap, config, T0 + 5 * POLL);
    expect(h).toMatchObject({ status: "Degraded", probePending: true, isolations: 1 });
    expect(isRoutable(h)).toBe(false);
    const back = applyProbe(h, ok(), config, T0 + 6 * POLL);
    expect(isRoutable(back)).toBe(true);
  });

  it("puts an Isolated node on probation: one failed probe isolates it again, for longer", () => {
    const h = restoreNodeHealth(snapshot(isolatedNode(), T0 + 4 * POLL), config, T0 + 5 * POLL);
    const again = applyProbe(h, FAIL, config, T0 + 6 * POLL);
    expect(again.status).toBe("Isolated");
    expect(again.isolatedUntil).toBe(T0 + 6 * POLL + 2 * config.isolationBaseMs);
  });

  it("keeps a Degraded node Degraded, with its failure streak", () => {
    const degraded = applyProbe(seasoned(), FAIL, config, T0 + 2 * POLL);
    const h = restoreNodeHealth(snapshot(degraded, T0 + 2 * POLL), config, T0 + 3 * POLL);
    expect(h).toMatchObject({ status: "Degraded", probePending: false, consecutiveFailures: 1 });
    // Two more failures complete the streak of three that isolates.
    const after = [FAIL, FAIL].reduce(
      (x, p, i) => applyProbe(x, p, config, T0 + (i + 4) * POLL),
      h,
    );
    expect(after.status).toBe("Isolated");
  });

  it("keeps a new node waiting for its first probe", () => {
    const h = restoreNodeHealth(snapshot(createNodeHealth(NODE, T0), T0), config, T0 + POLL);
    expect(h).toMatchObject({ status: "Degraded", probePending: true, isolations: 0 });
    expect(applyProbe(h, FAIL, config, T0 + 2 * POLL).status).toBe("Degraded");
  });

  it("starts afresh when the next probe reports another instance", () => {
    const h = restoreNodeHealth(snapshot(seasoned(), T0 + POLL), config, T0 + 2 * POLL);
    const replaced = applyProbe(h, ok({ instanceId: "inst-b" }), config, T0 + 3 * POLL);
    expect(replaced).toMatchObject({
      instanceId: "inst-b",
      latencyEwmaMs: null,
      tokensPerSecond: null,
    });
  });

  it("does not carry the dispatch error window over", () => {
    let h = seasoned();
    for (let i = 0; i < 6; i++) {
      h = applyObservation(h, observation(T0 + POLL + i, FIVE_XX), config, T0 + POLL + i);
    }
    expect(h.recentObservations.length).toBe(7);
    const restored = restoreNodeHealth(snapshot(h, T0 + 2 * POLL), config, T0 + 2 * POLL);
    expect(restored.recentObservations).toEqual([]);
    expect(restored.healthScore).toBe(h.healthScore);
  });

  it("produces a state that validates", () => {
    const h = restoreNodeHealth(snapshot(isolatedNode(), T0 + 4 * POLL), config, T0 + 5 * POLL);
    expect(NodeStateSchema.safeParse(toNodeState(h, T0 + 5 * POLL)).success).toBe(true);
  });

  it("rejects an invalid node id", () => {
    const snap = { ...snapshot(seasoned(), T0), node_id: "bad id" };
    expect(() => restoreNodeHealth(snap, config, T0)).toThrow(InvalidSubjectTokenError);
  });
});
