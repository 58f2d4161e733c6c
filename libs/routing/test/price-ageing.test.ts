import { describe, expect, it } from "vitest";
import type { CostEntry } from "../src/index.ts";
import {
  buildSnapshot,
  createLiveTable,
  decide,
  priceAgeS,
  resolveNodePrice,
} from "../src/index.ts";
import { MODEL, node, NOW, onPrem, policy, state } from "./fixtures.ts";

const MINUTE = 60_000;

function spot(nodeId: string, usd: number, updatedAt: number, maxAgeMs?: number): CostEntry {
  return {
    kind: "cloud_spot",
    cloud_account: "aws-main",
    family: "H100",
    nodes: [nodeId],
    usd_per_gpu_hour: usd,
    gpus_per_node: 8,
    updated_at: updatedAt,
    ...(maxAgeMs === undefined ? {} : { max_age_ms: maxAgeMs }),
  };
}

const cloudNode = (id: string, fallback?: number) =>
  node(id, {
    cloud: {
      account: "aws-main",
      region: "us-east-1",
      instance_type: "p5.48xlarge",
      gpus_per_instance: 8,
      ...(fallback === undefined ? {} : { fallback_usd_per_gpu_hour: fallback }),
    },
  });

describe("resolveNodePrice", () => {
  it("uses a spot price until its age limit, then the node's fallback rate, marked stale", () => {
    const entry = spot("a", 2, NOW, 10 * MINUTE);
    const fresh = resolveNodePrice(cloudNode("a", 5), entry, NOW + 9 * MINUTE, 15 * MINUTE);
    expect(fresh).toMatchObject({ source: "spot", usdPerHour: 16, stale: false });
    expect(fresh.validUntil).toBe(NOW + 10 * MINUTE);
    expect(priceAgeS(fresh, NOW + 9 * MINUTE)).toBe(540);

    const aged = resolveNodePrice(cloudNode("a", 5), entry, NOW + 10 * MINUTE, 15 * MINUTE);
    expect(aged).toMatchObject({ source: "fallback", usdPerHour: 40, stale: true, updatedAt: NOW });
    expect(aged.validUntil).toBe(Number.POSITIVE_INFINITY);
  });

  it("takes the routing default age limit when the entry names none", () => {
    const entry = spot("a", 2, NOW);
    expect(resolveNodePrice(cloudNode("a", 5), entry, NOW + 14 * MINUTE, 15 * MINUTE).source).toBe(
      "spot",
    );
    expect(resolveNodePrice(cloudNode("a", 5), entry, NOW + 15 * MINUTE, 15 * MINUTE).source).toBe(
      "fallback",
    );
  });

  it("an aged price without a fallback rate is no price; on-prem prices never age", () => {
    const aged = resolveNodePrice(cloudNode("a"), spot("a", 2, NOW), NOW + 60 * MINUTE, MINUTE);
    expect(aged).toMatchObject({ source: "none", usdPerHour: null, stale: true });
    const own = resolveNodePrice(node("o"), onPrem({ node_id: "o" }, 1.5), NOW * 2, MINUTE);
    expect(own).toMatchObject({ source: "on_prem", usdPerHour: 1.5, stale: false });
  });

  it("a cloud node with no spot price yet routes on its configured rate, not stale", () => {
    expect(resolveNodePrice(cloudNode("a", 3), null, NOW, MINUTE)).toMatchObject({
      source: "fallback",
      usdPerHour: 24,
      stale: false,
    });
  });
});

describe("snapshot and decision with ageing prices", () => {
  const nodes = [cloudNode("cheap", 4), cloudNode("dear", 3)];
  const costs = [spot("cheap", 1, NOW, 10 * MINUTE), spot("dear", 2, NOW, 20 * MINUTE)];
  const route = (now: number) => {
    const snapshot = buildSnapshot({ nodes, costs, now });
    const live = createLiveTable(snapshot);
    for (const n of nodes) live.applyState(state(n.id));
    const decision = decide(
      snapshot,
      live,
      { model: MODEL, tier: 1 },
      policy({ cost_priority: "cost" }),
      now,
    );
    if (!decision.ok) throw new Error(decision.detail);
    return { snapshot, decision };
  };

  it("carries the first expiry so the caller knows when to rebuild", () => {
    expect(route(NOW).snapshot.pricesValidUntil).toBe(NOW + 10 * MINUTE);
    expect(route(NOW + 11 * MINUTE).snapshot.pricesValidUntil).toBe(NOW + 20 * MINUTE);
    expect(route(NOW + 21 * MINUTE).snapshot.pricesValidUntil).toBe(Number.POSITIVE_INFINITY);
  });

  it("cost routing follows the spot price, then the fallback rates once it aged out", () => {
    const fresh = route(NOW + MINUTE).decision;
    expect(fresh.candidates[0]!.node.id).toBe("cheap");
    expect(fresh.candidates[0]!.price).toMatchObject({ source: "spot", stale: false });

    // cheap's spot price aged out: its fallback (4) is dearer than dear's spot price (2).
    const later = route(NOW + 11 * MINUTE);
    expect(later.decision.candidates[0]!.node.id).toBe("dear");
    expect(later.decision.candidates[1]!.price).toMatchObject({ source: "fallback", stale: true });
    expect(later.snapshot.warnings.join("\n")).toMatch(
      /node cheap spot price 660s old .*fallback rate/,
    );

    // Both aged: the configured rates decide (dear's 3 beats cheap's 4).
    const both = route(NOW + 30 * MINUTE).decision;
    expect(both.candidates[0]!.node.id).toBe("dear");
    expect(both.candidates.map((c) => c.price.source)).toEqual(["fallback", "fallback"]);
  });

  it("a node without a usable price is ranked at the highest known price and said so", () => {
    const snapshot = buildSnapshot({
      nodes: [cloudNode("unpriced"), cloudNode("priced", 1)],
      costs: [spot("unpriced", 0.1, NOW, MINUTE), spot("priced", 3, NOW, 60 * MINUTE)],
      now: NOW + 2 * MINUTE,
    });
    expect(snapshot.nodes[0]!.price.source).toBe("none");
    expect(snapshot.fallbackUsdPerHour).toBe(24);
    expect(snapshot.warnings.join("\n")).toMatch(
      /node unpriced has no usable price .*ranked at the highest known price 24\/h/,
    );
    const live = createLiveTable(snapshot);
    live.applyState(state("unpriced"));
    live.applyState(state("priced"));
    const decision = decide(
      snapshot,
      live,
      { model: MODEL, tier: 1 },
      policy({ cost_priority: "cost" }),
      NOW + 2 * MINUTE,
    );
    // Routing goes on: both are candidates, at equal cost (the registration order breaks ties).
    expect(decision.ok && decision.candidates.map((c) => c.node.id)).toEqual([
      "unpriced",
      "priced",
    ]);
  });
});
