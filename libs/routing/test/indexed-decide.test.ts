// The indexed decision (src/decide.ts) against the plain scan it replaced
// (test/reference-decide.ts): for random fleets, live states, policies and requests, with
// state churn and snapshot rebinds between decisions, both must return the same thing —
// chosen node, fallback order, estimates, passed-over list in order, saturation detail,
// retry-after, and the jitter drawn from the same seeded source.
import { describe, expect, it } from "vitest";
import { NODE_APIS, type NodeApi, type NodeSpec } from "@zml/contracts";
import {
  buildSnapshot,
  compilePolicy,
  createLiveTable,
  decide,
  type CostEntry,
  type Decision,
  type LiveTable,
  type QualityScore,
  type Rejection,
  type ResolvedPolicy,
  type RouteRequest,
  type RoutingSnapshot,
} from "../src/index.ts";
import { NOW, node, seeded, state } from "./fixtures.ts";
import { referenceDecide } from "./reference-decide.ts";

const FAMILIES = ["A", "B", "C", "D"];
const MODELS = ["m1", "m2", "m3"];
const STALE_MS = 60_000;

type Rnd = () => number;
const pick = <T>(rnd: Rnd, xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
const int = (rnd: Rnd, min: number, max: number): number =>
  min + Math.floor(rnd() * (max - min + 1));
const chance = (rnd: Rnd, p: number): boolean => rnd() < p;

/** A few distinct values only, so that ties between nodes are common. */
const TPS = [null, 0, 50, 100, 400, 400, 1000, 2500, Number.NaN];
const LATENCY = [null, 0, 300, 1200, 1200, 5000, 40_000];

function randomSpecs(rnd: Rnd, count: number, prefix: string): NodeSpec[] {
  const specs: NodeSpec[] = [];
  for (let i = 0; i < count; i++) {
    const models = MODELS.filter(() => chance(rnd, 0.55));
    const apis = NODE_APIS.filter(() => chance(rnd, 0.7));
    specs.push(
      node(`${prefix}${i}`, {
        accelerator_family: pick(rnd, FAMILIES),
        tier: int(rnd, 1, 4),
        models: models.length > 0 ? models : ["m1"],
        apis: apis.length > 0 ? apis : ["chat"],
        max_concurrency: int(rnd, 1, 8),
        registered_at: int(rnd, 0, 6),
      }),
    );
  }
  return specs;
}

function randomSnapshot(rnd: Rnd, specs: readonly NodeSpec[]): RoutingSnapshot {
  const costs: CostEntry[] = [];
  const quality: QualityScore[] = [];
  for (const family of FAMILIES) {
    if (chance(rnd, 0.5)) {
      costs.push({
        kind: "on_prem",
        family,
        usd_per_gpu_hour: pick(rnd, [0, 1, 2, 2, 3.5]),
        gpus_per_node: 1,
      });
    }
    for (const model of MODELS) {
      if (chance(rnd, 0.4)) {
        quality.push({
          model,
          family,
          score: pick(rnd, [40, 70, 70, 90]),
          source: "p",
          updated_at: NOW - int(rnd, 0, 2 * STALE_MS),
        });
      }
    }
  }
  for (const spec of specs) {
    if (chance(rnd, 0.2)) {
      costs.push({
        kind: "on_prem",
        node_id: spec.id,
        usd_per_gpu_hour: pick(rnd, [0.5, 1, 2]),
        gpus_per_node: 2,
      });
    }
    if (chance(rnd, 0.15)) {
      quality.push({
        model: pick(rnd, MODELS),
        node_id: spec.id,
        score: pick(rnd, [50, 70, 95]),
        source: "p",
        updated_at: NOW - int(rnd, 0, 2 * STALE_MS),
      });
    }
  }
  return buildSnapshot(
    { nodes: specs, costs, quality },
    {
      maxCandidates: pick(rnd, [1, 2, 3, 3, 5, 64]),
      qualityStalenessMs: STALE_MS,
      latencyBias: pick(rnd, [0, 0.3, 1]),
      defaultTokensPerSecond: pick(rnd, [100, 100, 3000]),
      jitter: pick(rnd, [0, 0.05, 0.05, 0.5]),
    },
  );
}

/** One random change to what the dispatcher knows about a node. */
function churn(rnd: Rnd, live: LiveTable, ids: readonly string[]): void {
  const id = chance(rnd, 0.05) ? "ghost" : pick(rnd, ids);
  const now = NOW + int(rnd, -2000, 2000);
  switch (int(rnd, 0, 10)) {
    case 0:
    case 1:
    case 2:
      live.applyState(
        state(id, {
          status: pick(rnd, ["Active", "Active", "Active", "Degraded", "Isolated"] as const),
          probe_pending: chance(rnd, 0.1),
          queue_depth: pick(rnd, [0, 0, 1, 3, 8, 20, Number.NaN]),
          running: pick(rnd, [0, 1, 4]),
          health_score: pick(rnd, [0, 50, 80, 100, 150]),
          tokens_per_second: pick(rnd, TPS),
          latency_ewma_ms: pick(rnd, LATENCY),
          checked_at: now,
          instance_id: pick(rnd, [null, "i1", "i2"]),
        }),
      );
      break;
    case 3:
    case 4:
      live.dispatched(id);
      break;
    case 5:
      live.completed(id, chance(rnd, 0.5) ? now : undefined);
      break;
    case 6:
      live.coolDown(id, NOW + int(rnd, -5000, 30_000));
      break;
    case 7:
      live.setAttestedUntil(id, chance(rnd, 0.2) ? 0 : NOW + int(rnd, -5000, 60_000));
      break;
    case 8:
      live.observeLatency(id, pick(rnd, [100, 900, 4000, -1, Number.NaN]));
      break;
    case 9: {
      const counts = new Map<string, number>();
      for (const other of ids) if (chance(rnd, 0.3)) counts.set(other, int(rnd, 0, 6));
      live.setPeerInFlight(counts, int(rnd, 1, 3), chance(rnd, 0.5), now);
      break;
    }
    default:
      if (chance(rnd, 0.5)) live.setTokensPerSecond(id, pick(rnd, [0, 200, 1500, Number.NaN]));
      else live.clearState(id);
  }
}

function randomPolicy(rnd: Rnd): ResolvedPolicy {
  const chain = [...FAMILIES, "Z"].filter(() => chance(rnd, 0.6));
  return compilePolicy({
    name: "prop",
    accelerator_preference: (chain.length > 0 ? chain : ["A"]).map((family) => ({
      family,
      priority: int(rnd, 1, 3),
    })),
    latency_target_ms: pick(rnd, [1, 500, 2000, 5000, 30_000]),
    cost_priority: pick(rnd, ["cost", "balanced", "latency"] as const),
    queue_on_saturation: chance(rnd, 0.5),
    max_queue_ms: 1000,
    prefix_affinity: true,
  });
}

/** A request, with `random` built twice from the same seed so both deciders draw alike. */
function randomRequest(rnd: Rnd, ids: readonly string[]): () => RouteRequest {
  const exclude = new Set<string>();
  if (chance(rnd, 0.3)) for (let k = int(rnd, 1, 4); k > 0; k--) exclude.add(pick(rnd, ids));
  const randomKind = pick(rnd, ["none", "seeded", "seeded", "broken"]);
  const seed = int(rnd, 1, 1e9);
  const base: RouteRequest = {
    model: pick(rnd, [...MODELS, "m1", "unknown"]),
    tier: int(rnd, 1, 4),
    api: chance(rnd, 0.7) ? pick(rnd, NODE_APIS as readonly NodeApi[]) : undefined,
    acceleratorHint: chance(rnd, 0.4) ? pick(rnd, [...FAMILIES, "Z", "Q"]) : undefined,
    sort: chance(rnd, 0.5) ? pick(rnd, ["quality", "price", "latency"] as const) : undefined,
    expectedTokens: chance(rnd, 0.6)
      ? pick(rnd, [1, 64, 256, 4000, 0, -5, Number.NaN, Infinity, 1e12])
      : undefined,
    exclude: exclude.size > 0 || chance(rnd, 0.5) ? exclude : undefined,
  };
  return () => {
    const request = { ...base };
    if (randomKind === "seeded") request.random = seeded(seed);
    else if (randomKind === "broken") request.random = () => 7;
    return request;
  };
}

/** Everything a caller can read from a result, `passedOver` included. */
function plain(result: Decision | Rejection): unknown {
  return { ...result, passedOver: result.passedOver };
}

function expectSame(
  snapshot: RoutingSnapshot,
  live: LiveTable,
  makeRequest: () => RouteRequest,
  policy: ResolvedPolicy,
  now: number,
): Decision | Rejection {
  const expected = referenceDecide(snapshot, live, makeRequest(), policy, now);
  const actual = decide(snapshot, live, makeRequest(), policy, now);
  expect(plain(actual)).toEqual(plain(expected));
  return actual;
}

describe("indexed decide() against the reference scan", () => {
  it("gives the same decision for random fleets, state churn, rebinds, policies and requests", () => {
    const outcomes = new Map<string, number>();
    for (let world = 0; world < 250; world++) {
      const rnd = seeded(1000 + world);
      const size = world % 25 === 0 ? int(rnd, 100, 300) : int(rnd, 0, 40);
      let specs = randomSpecs(rnd, size, "n");
      let snapshot = randomSnapshot(rnd, specs);
      const live = createLiveTable(snapshot);
      let ids = specs.map((s) => s.id);
      if (ids.length === 0) ids = ["n0"];
      for (let k = 0; k < size * 3; k++) churn(rnd, live, ids);
      for (let step = 0; step < 30; step++) {
        const now = NOW + int(rnd, -1000, 1000);
        const result = expectSame(snapshot, live, randomRequest(rnd, ids), randomPolicy(rnd), now);
        const key = result.ok ? `ok:${result.ranking}` : result.reason;
        outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
        for (let k = int(rnd, 0, 5); k > 0; k--) churn(rnd, live, ids);
        if (chance(rnd, 0.05)) {
          // A spec change: some nodes leave, some arrive, others change tier or models.
          const kept = specs.filter(() => chance(rnd, 0.8));
          const changed = kept.map((s) =>
            chance(rnd, 0.1) ? { ...s, tier: int(rnd, 1, 4), models: ["m2"] } : s,
          );
          specs = [...changed, ...randomSpecs(rnd, int(rnd, 0, 5), `w${step}-`)];
          snapshot = randomSnapshot(rnd, specs);
          live.rebind(snapshot);
          ids = specs.length > 0 ? specs.map((s) => s.id) : ["n0"];
        }
      }
    }
    // The generator must reach every kind of outcome, or the comparison proves little.
    for (const key of [
      "ok:balanced",
      "ok:cost",
      "ok:latency",
      "ok:quality",
      "ok:fastest",
      "unknown_model",
      "api_not_served",
      "no_node_for_model_tier",
      "no_usable_node",
      "saturated",
    ]) {
      expect(outcomes.get(key) ?? 0, key).toBeGreaterThan(0);
    }
  });

  it("agrees on a large uniform fleet where most nodes tie", () => {
    const rnd = seeded(7);
    const specs: NodeSpec[] = [];
    for (let i = 0; i < 600; i++) {
      specs.push(
        node(`t${i}`, {
          accelerator_family: FAMILIES[i % 2]!,
          tier: i % 3 === 0 ? 3 : 1,
          models: ["m1"],
          max_concurrency: 4,
        }),
      );
    }
    const snapshot = buildSnapshot({ nodes: specs }, { maxCandidates: 4 });
    const live = createLiveTable(snapshot);
    for (const spec of specs) live.applyState(state(spec.id, { tokens_per_second: 1000 }));
    for (let i = 0; i < specs.length; i += 5) live.setAttestedUntil(specs[i]!.id, NOW + 10_000);
    const ids = specs.map((s) => s.id);
    for (let step = 0; step < 200; step++) {
      for (const tier of [1, 3] as const) {
        for (const jitter of [false, true]) {
          const request = (): RouteRequest => ({
            model: "m1",
            tier,
            random: jitter ? seeded(step) : undefined,
          });
          expectSame(snapshot, live, request, randomPolicy(rnd), NOW);
        }
      }
      // Fill nodes up one request at a time until the tier saturates.
      live.dispatched(pick(rnd, ids));
      live.dispatched(pick(rnd, ids));
      if (chance(rnd, 0.3)) live.coolDown(pick(rnd, ids), NOW + 5000);
    }
  });
});
