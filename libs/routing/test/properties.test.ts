import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { NODE_APIS } from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import {
  buildSnapshot,
  compilePolicy,
  createLiveTable,
  decide,
  nextAttempt,
  type AttemptFailure,
  type CostEntry,
  type Decision,
  type FailedAttempt,
  type LiveTable,
  type QualityScore,
  type Rejection,
  type ResolvedPolicy,
  type RouteRequest,
  type RoutingSnapshot,
} from "../src/index.ts";
import { NOW, seeded, state } from "./fixtures.ts";

const FAMILIES = ["A", "B", "C"];
const MODELS = ["m1", "m2"];
const STALE_MS = 60_000;
const RUNS = { numRuns: 400 };

const nodeArb = fc.record({
  family: fc.constantFrom(...FAMILIES),
  tier: fc.integer({ min: 1, max: 4 }),
  models: fc.subarray(MODELS, { minLength: 1 }),
  apis: fc.subarray([...NODE_APIS], { minLength: 1 }),
  maxConcurrency: fc.integer({ min: 1, max: 8 }),
  registeredAt: fc.integer({ min: 0, max: 5 }),
  status: fc.constantFrom("Active", "Active", "Active", "Degraded", "Isolated", "missing"),
  probePending: fc.integer({ min: 0, max: 4 }).map((x) => x === 0),
  queueDepth: fc.integer({ min: 0, max: 10 }),
  inFlight: fc.integer({ min: 0, max: 4 }),
  tps: fc.option(fc.double({ min: 0, noNaN: true, noDefaultInfinity: true })),
  latency: fc.option(fc.double({ min: 0, noNaN: true, noDefaultInfinity: true })),
  health: fc.integer({ min: 0, max: 100 }),
  cooldown: fc.option(fc.integer({ min: -10_000, max: 10_000 })),
  attested: fc.option(fc.integer({ min: -10_000, max: 10_000 })),
  price: fc.option(fc.double({ min: 0, max: 50, noNaN: true })),
  quality: fc.option(
    fc.record({
      score: fc.integer({ min: 0, max: 100 }),
      age: fc.integer({ min: 0, max: 2 * STALE_MS }),
    }),
  ),
});
type NodeArb = typeof nodeArb extends fc.Arbitrary<infer T> ? T : never;

const worldArb = fc.record({
  nodes: fc.array(nodeArb, { maxLength: 12 }),
  familyPrice: fc.option(fc.double({ min: 0, max: 50, noNaN: true })),
  maxCandidates: fc.integer({ min: 1, max: 5 }),
});

const policyArb = fc.record({
  chain: fc.uniqueArray(fc.constantFrom(...FAMILIES, "Z"), { minLength: 1 }),
  costPriority: fc.constantFrom("cost" as const, "balanced" as const, "latency" as const),
  latencyTarget: fc.integer({ min: 1, max: 20_000 }),
  queue: fc.boolean(),
});

const requestArb = fc.record({
  model: fc.constantFrom(...MODELS, "m3"),
  tier: fc.integer({ min: 1, max: 4 }),
  api: fc.option(fc.constantFrom(...NODE_APIS), { nil: undefined }),
  hint: fc.option(fc.constantFrom(...FAMILIES, "Z"), { nil: undefined }),
  sort: fc.option(fc.constantFrom("quality" as const, "price" as const, "latency" as const), {
    nil: undefined,
  }),
  expectedTokens: fc.option(
    fc.oneof(fc.integer({ min: 1, max: 4000 }), fc.constantFrom(0, -5, Number.NaN, Infinity)),
    { nil: undefined },
  ),
  exclude: fc.array(fc.integer({ min: 0, max: 11 }), { maxLength: 4 }),
  random: fc.constantFrom("none", "seeded", "broken"),
});

type World = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;
type PolicyIn = typeof policyArb extends fc.Arbitrary<infer T> ? T : never;
type RequestIn = typeof requestArb extends fc.Arbitrary<infer T> ? T : never;

interface Built {
  snapshot: RoutingSnapshot;
  live: LiveTable;
  specs: NodeSpec[];
  arbs: NodeArb[];
}

function build(
  world: World,
  opts: { withCosts?: boolean; withQuality?: boolean; noise?: boolean } = {},
): Built {
  const specs = world.nodes.map((n, i): NodeSpec =>
    nodeSpec(`n${i}`, {
      endpoint: `http://n${i}:8000`,
      accelerator_family: n.family,
      tier: n.tier,
      models: n.models,
      apis: n.apis,
      max_concurrency: n.maxConcurrency,
      registered_at: n.registeredAt,
    }),
  );
  const costs: CostEntry[] = [];
  const quality: QualityScore[] = [];
  if (opts.withCosts !== false) {
    if (world.familyPrice !== null) {
      costs.push({
        kind: "on_prem",
        family: "A",
        usd_per_gpu_hour: world.familyPrice,
        gpus_per_node: 1,
      });
    }
    world.nodes.forEach((n, i) => {
      if (n.price !== null) {
        costs.push({
          kind: "on_prem",
          node_id: `n${i}`,
          usd_per_gpu_hour: n.price,
          gpus_per_node: 2,
        });
      }
    });
  }
  if (opts.withQuality !== false) {
    world.nodes.forEach((n, i) => {
      if (n.quality === null) return;
      for (const model of n.models) {
        quality.push({
          model,
          node_id: `n${i}`,
          score: n.quality.score,
          source: "p",
          updated_at: NOW - n.quality.age,
        });
      }
    });
  }
  if (opts.noise === true) {
    // Configuration mistakes the snapshot must tolerate: a repeated node id, prices and
    // scores for nodes nobody registered, a spot price naming a node of another family.
    if (specs[0]) specs.push({ ...specs[0], tier: specs[0].tier === 1 ? 2 : 1 });
    costs.push({ kind: "on_prem", node_id: "ghost", usd_per_gpu_hour: 1, gpus_per_node: 1 });
    costs.push({
      kind: "cloud_spot",
      cloud_account: "acct",
      family: "Z",
      nodes: specs.map((x) => x.id).concat("ghost"),
      usd_per_gpu_hour: 3,
      gpus_per_node: 4,
      updated_at: NOW,
    });
    quality.push({ model: "m1", node_id: "ghost", score: 50, source: "p", updated_at: NOW });
  }
  const snapshot = buildSnapshot(
    { nodes: specs, costs, quality },
    { maxCandidates: world.maxCandidates, qualityStalenessMs: STALE_MS },
  );
  const live = createLiveTable(snapshot);
  world.nodes.forEach((n, i) => {
    const id = `n${i}`;
    if (n.status !== "missing") {
      live.applyState(
        state(id, {
          status: n.status as "Active",
          probe_pending: n.probePending,
          queue_depth: n.queueDepth,
          health_score: n.health,
          tokens_per_second: n.tps,
          latency_ewma_ms: n.latency,
        }),
      );
    }
    for (let k = 0; k < n.inFlight; k++) live.dispatched(id);
    if (n.cooldown !== null) live.coolDown(id, NOW + n.cooldown);
    if (n.attested !== null) live.setAttestedUntil(id, NOW + n.attested);
  });
  return { snapshot, live, specs, arbs: world.nodes };
}

function toPolicy(p: PolicyIn): ResolvedPolicy {
  return compilePolicy({
    name: "prop",
    accelerator_preference: p.chain.map((family, i) => ({ family, priority: (i * 7) % 5 })),
    latency_target_ms: p.latencyTarget,
    cost_priority: p.costPriority,
    queue_on_saturation: p.queue,
    max_queue_ms: 1000,
    prefix_affinity: true,
  });
}

function toRequest(r: RequestIn): RouteRequest {
  const random =
    r.random === "seeded" ? seeded(42) : r.random === "broken" ? () => Number.NaN : undefined;
  return {
    model: r.model,
    tier: r.tier,
    api: r.api,
    acceleratorHint: r.hint,
    sort: r.sort,
    expectedTokens: r.expectedTokens,
    exclude: new Set(r.exclude.map((i) => `n${i}`)),
    random,
  };
}

const route = (b: Built, r: RouteRequest, p: ResolvedPolicy): Decision | Rejection =>
  decide(b.snapshot, b.live, r, p, NOW);

/** Mirrors the filter rules from the raw inputs, independently of the implementation. */
function usable(b: Built, id: string, r: RouteRequest): boolean {
  const i = Number(id.slice(1));
  const n = b.arbs[i]!;
  if (r.exclude?.has(id)) return false;
  if (n.status !== "Active" || n.probePending) return false;
  if (n.cooldown !== null && n.cooldown > 0) return false;
  if (n.tier >= 3 && !(n.attested !== null && n.attested > 0)) return false;
  return n.queueDepth + n.inFlight < n.maxConcurrency;
}

describe("decide properties", () => {
  it("never throws and returns a well-formed outcome", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, fc.boolean(), (world, p, r, noise) => {
        const d = route(build(world, { noise }), toRequest(r), toPolicy(p));
        if (d.ok) {
          expect(d.candidates.length).toBeGreaterThanOrEqual(1);
          expect(d.candidates.length).toBeLessThanOrEqual(world.maxCandidates);
          expect(d.viable).toBe(
            d.candidates.length +
              d.passedOver.filter(
                (x) => x.reason === "ranked_lower" || x.reason === "over_latency_target",
              ).length,
          );
          for (const c of d.candidates) {
            expect(Number.isFinite(c.responseMs)).toBe(true);
            if (c.costUsd !== null) expect(Number.isFinite(c.costUsd)).toBe(true);
          }
        } else {
          expect([
            "unknown_model",
            "api_not_served",
            "no_node_for_model_tier",
            "no_usable_node",
            "saturated",
          ]).toContain(d.reason);
          if (d.reason !== "unknown_model" && d.reason !== "api_not_served")
            expect(d.retryAfterS).toBeGreaterThanOrEqual(1);
          if (d.reason !== "saturated") expect(d.queueForMs).toBe(0);
        }
      }),
      RUNS,
    );
  });

  it("keeps tiers and APIs apart and never lists an unusable node", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const b = build(world);
        const request = toRequest(r);
        const pol = toPolicy(p);
        const d = route(b, request, pol);
        if (!d.ok) return;
        for (const c of d.candidates) {
          expect(c.node.tier).toBe(request.tier);
          expect(c.node.apis).toContain(request.api ?? "chat");
          expect(c.node.models).toContain(request.model);
          expect(pol.chain).toContain(c.node.accelerator_family);
          expect(usable(b, c.node.id, request)).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it("accounts for every node of the policy's families exactly once", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const b = build(world);
        const request = toRequest(r);
        const pol = toPolicy(p);
        const d = route(b, request, pol);
        const expected = b.specs
          .filter(
            (s) =>
              s.tier === request.tier &&
              s.apis.includes(request.api ?? "chat") &&
              s.models.includes(request.model) &&
              pol.chain.includes(s.accelerator_family),
          )
          .map((s) => s.id)
          .sort();
        const seen = [
          ...(d.ok ? d.candidates.map((c) => c.node.id) : []),
          ...d.passedOver.map((x) => x.nodeId),
        ].sort();
        expect(seen).toEqual(expected);
        for (const x of d.passedOver) {
          const filtered = !["ranked_lower", "over_latency_target"].includes(x.reason);
          expect(filtered).toBe(!usable(b, x.nodeId, request));
        }
        if (!d.ok && d.reason === "saturated") {
          expect(
            d.passedOver.some((x) =>
              ["cooling_down", "at_capacity", "excluded"].includes(x.reason),
            ),
          ).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it("never ranks a node over the latency target above one within it", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const d = route(build(world), toRequest(r), toPolicy(p));
        if (!d.ok) return;
        const within = d.candidates.map((c) => c.withinLatencyTarget);
        expect(within).toEqual([...within].sort((a, b) => Number(b) - Number(a)));
        expect(d.latencyTargetMet).toBe(within[0]);
        if (!d.latencyTargetMet) {
          expect(d.passedOver.some((x) => x.reason === "over_latency_target")).toBe(false);
        }
      }),
      RUNS,
    );
  });

  it("cost ranking puts the cheapest node within the target first", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const priced = {
          ...world,
          maxCandidates: 5,
          nodes: world.nodes.map((n) => ({ ...n, price: n.price ?? 1 })),
        };
        const request = {
          ...toRequest(r),
          acceleratorHint: undefined,
          random: undefined,
          sort: undefined,
        };
        const d = route(build(priced), request, toPolicy({ ...p, costPriority: "cost" }));
        if (!d.ok) return;
        const costs = d.candidates.filter((c) => c.withinLatencyTarget).map((c) => c.costUsd!);
        for (let k = 1; k < costs.length; k++)
          expect(costs[k]!).toBeGreaterThanOrEqual(costs[k - 1]!);
      }),
      RUNS,
    );
  });

  it("the latency policy ignores cost", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const pol = toPolicy({ ...p, costPriority: "latency" });
        const request = { ...r, sort: undefined };
        const withCosts = route(build(world), toRequest(request), pol);
        const without = route(build(world, { withCosts: false }), toRequest(request), pol);
        const summary = (d: Decision | Rejection) =>
          d.ok ? [d.candidates.map((c) => c.node.id), d.passedOver] : [d.reason, d.passedOver];
        expect(summary(withCosts)).toEqual(summary(without));
      }),
      RUNS,
    );
  });

  it("quality scores, stale or not, never cause a rejection that routing without them would not", () => {
    fc.assert(
      fc.property(worldArb, policyArb, requestArb, (world, p, r) => {
        const pol = toPolicy(p);
        const withQuality = route(build(world), toRequest({ ...r, sort: "quality" }), pol);
        const without = route(
          build(world, { withQuality: false }),
          toRequest({ ...r, sort: "quality" }),
          pol,
        );
        expect(withQuality.ok).toBe(without.ok);
        if (!withQuality.ok && !without.ok) expect(withQuality.reason).toBe(without.reason);
        if (withQuality.ok && without.ok) expect(withQuality.viable).toBe(without.viable);
      }),
      RUNS,
    );
  });
});

const outcomeArb = fc.oneof(
  fc.constant({ kind: "ok" as const }),
  fc.integer({ min: 400, max: 599 }).map((status): AttemptFailure => ({ kind: "status", status })),
  fc.constant<AttemptFailure>({ kind: "network_error" }),
  fc.constant<AttemptFailure>({ kind: "timeout" }),
  fc.constantFrom(401, 403).map((status): AttemptFailure => ({ kind: "upstream_auth", status })),
  fc.constant<AttemptFailure>({ kind: "bad_response", status: 200 }),
);

describe("attempt properties", () => {
  it("never more than 3 attempts, never a 4xx retried, never a failed node again", () => {
    fc.assert(
      fc.property(
        worldArb,
        policyArb,
        requestArb,
        fc.array(fc.constantFrom(...MODELS, "m3"), { maxLength: 3 }),
        fc.array(outcomeArb, { minLength: 8, maxLength: 8 }),
        (world, p, r, fallbacks, outcomes) => {
          const b = build(world);
          const pol = toPolicy(p);
          const base = toRequest(r);
          const models = [base.model, ...fallbacks];
          const failures: FailedAttempt[] = [];
          const routeModel = (
            model: string,
            exclude: ReadonlySet<string>,
            prefer: string | undefined,
          ) =>
            route(
              b,
              { ...base, model, exclude, acceleratorHint: prefer ?? base.acceleratorHint },
              pol,
            );
          for (let step = 0; step < outcomes.length; step++) {
            const next = nextAttempt({ models, failures, route: routeModel });
            const last = failures.at(-1);
            if (last?.failure.kind === "status" && last.failure.status < 500) {
              expect(next).toEqual({ action: "stop", reason: "client_error" });
            }
            if (next.action === "stop") break;
            expect(next.attempt).toBe(failures.length + 1);
            expect(next.attempt).toBeLessThanOrEqual(3);
            expect(failures.map((f) => f.nodeId)).not.toContain(next.candidate.node.id);
            expect(next.candidate.node.tier).toBe(base.tier);
            const outcome = outcomes[step]!;
            if (outcome.kind === "ok") break;
            failures.push({
              model: next.model,
              nodeId: next.candidate.node.id,
              family: next.candidate.node.accelerator_family,
              failure: outcome,
            });
          }
          expect(failures.length).toBeLessThanOrEqual(3);
        },
      ),
      RUNS,
    );
  });
});
