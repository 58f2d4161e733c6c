import { InvalidSubjectTokenError, NodeStateSchema } from "@zml/contracts";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_HEALTH_CONFIG,
  NodeMismatchError,
  applyObservation,
  applyProbe,
  createNodeHealth,
  isRoutable,
  toNodeState,
  type HealthConfig,
  type NodeHealth,
  type ProbeResult,
} from "../src/index.ts";
import { FAIL, FIVE_XX, deepFreeze, observation, ok } from "./helpers.ts";

const config: HealthConfig = DEFAULT_HEALTH_CONFIG;
const T0 = 1_750_000_000_000;
const POLL = 5_000;
const NODE = "h100-a";

/** Applies probes one poll interval apart, starting one interval after `at`. */
function poll(health: NodeHealth, probes: readonly ProbeResult[], at: number): NodeHealth {
  return probes.reduce((h, probe, i) => applyProbe(h, probe, config, at + (i + 1) * POLL), health);
}

function activeNode(at = T0): NodeHealth {
  return applyProbe(createNodeHealth(NODE, at), ok(), config, at);
}

function expectValidState(health: NodeHealth, now: number): void {
  const result = NodeStateSchema.safeParse(toNodeState(health, now));
  expect(result.success, JSON.stringify(result.error?.issues)).toBe(true);
}

describe("a new node", () => {
  it("is Degraded with probe_pending and not routable until its first successful probe", () => {
    const fresh = createNodeHealth(NODE, T0);
    expect(fresh).toMatchObject({ status: "Degraded", probePending: true, isolations: 0 });
    expect(isRoutable(fresh)).toBe(false);
    expect(toNodeState(fresh, T0)).toMatchObject({
      status: "Degraded",
      probe_pending: true,
      checked_at: T0,
      last_ok_at: null,
    });
    expectValidState(fresh, T0);
  });

  it("becomes Active on its first successful probe", () => {
    const active = applyProbe(
      createNodeHealth(NODE, T0),
      ok({ running: 2, waiting: 1 }),
      config,
      T0 + 1,
    );
    expect(active).toMatchObject({ status: "Active", probePending: false, lastOkAt: T0 + 1 });
    expect(isRoutable(active)).toBe(true);
    expect(toNodeState(active, T0 + 1)).toMatchObject({
      status: "Active",
      probe_pending: false,
      queue_depth: 3,
      running: 2,
      waiting: 1,
      kv_cache_usage: 0.2,
      checked_at: T0 + 1,
      last_ok_at: T0 + 1,
      consecutive_failures: 0,
      last_error: null,
    });
  });

  it("stays probe_pending while its probes fail, and is isolated after three", () => {
    let h = createNodeHealth(NODE, T0);
    h = poll(h, [FAIL, FAIL], T0);
    expect(h).toMatchObject({ status: "Degraded", probePending: true, consecutiveFailures: 2 });
    h = applyProbe(h, FAIL, config, T0 + 3 * POLL);
    expect(h).toMatchObject({ status: "Isolated", isolatedUntil: T0 + 3 * POLL + 30_000 });
    expect(isRoutable(h)).toBe(false);
  });

  it("rejects a node id that cannot be a subject token", () => {
    expect(() => createNodeHealth("bad.node", T0)).toThrow(InvalidSubjectTokenError);
  });
});

describe("probe transitions", () => {
  it("Active → Degraded on one failed probe, with the error recorded", () => {
    const h = applyProbe(activeNode(), FAIL, config, T0 + POLL);
    expect(h).toMatchObject({ status: "Degraded", probePending: false, consecutiveFailures: 1 });
    expect(isRoutable(h)).toBe(false);
    expect(toNodeState(h, T0 + POLL)).toMatchObject({
      status: "Degraded",
      consecutive_failures: 1,
      last_error: FAIL.ok ? null : FAIL.error,
      checked_at: T0 + POLL,
      last_ok_at: T0,
    });
  });

  it("Degraded → Active on the next successful probe", () => {
    const h = poll(activeNode(), [FAIL, ok()], T0);
    expect(h).toMatchObject({ status: "Active", consecutiveFailures: 0, lastError: null });
    expect(isRoutable(h)).toBe(true);
  });

  it("Active → Isolated after three failed probes in a row", () => {
    const h = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    expect(h).toMatchObject({ status: "Isolated", probePending: false, isolations: 1 });
    expect(h.isolatedUntil).toBe(T0 + 3 * POLL + config.isolationBaseMs);
  });

  it("stays Isolated through successful probes until the isolation period elapses", () => {
    const isolatedAt = T0 + 3 * POLL;
    let h = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    h = poll(h, [ok({ running: 7 }), ok({ running: 7 })], isolatedAt);
    expect(h).toMatchObject({ status: "Isolated", running: 7, consecutiveFailures: 0 });
    expect(toNodeState(h, isolatedAt + 2 * POLL).status).toBe("Isolated");
  });

  it("leaving isolation sets probe_pending; a successful probe then makes it Active", () => {
    const isolatedAt = T0 + 3 * POLL;
    const isolated = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    const after = isolatedAt + config.isolationBaseMs;
    expect(toNodeState(isolated, after)).toMatchObject({ status: "Degraded", probe_pending: true });
    expectValidState(isolated, after);

    const recovered = applyProbe(isolated, ok(), config, after);
    expect(recovered).toMatchObject({ status: "Active", probePending: false });
    expect(isRoutable(recovered)).toBe(true);
  });

  it("a failed probe on probation isolates again, for twice as long", () => {
    const isolatedAt = T0 + 3 * POLL;
    const isolated = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    const probationAt = isolatedAt + config.isolationBaseMs;
    const again = applyProbe(isolated, FAIL, config, probationAt);
    expect(again).toMatchObject({ status: "Isolated", isolations: 2 });
    expect(again.isolatedUntil).toBe(probationAt + 2 * config.isolationBaseMs);
  });
});

describe("flapping", () => {
  /** Alternates failing and succeeding probes every poll and records each isolation. */
  function flap(polls: number): { periods: number[]; activePolls: number[] } {
    let h = activeNode();
    const periods: number[] = [];
    const activePolls: number[] = [];
    for (let i = 1; i <= polls; i++) {
      const now = T0 + i * POLL;
      const before = h;
      h = applyProbe(h, i % 2 === 1 ? FAIL : ok(), config, now);
      // A new isolation shows as a new end time; it may start straight from probation.
      if (h.status === "Isolated" && h.isolatedUntil !== before.isolatedUntil) {
        periods.push((h.isolatedUntil ?? now) - now);
      }
      if (isRoutable(h)) activePolls.push(i);
    }
    return { periods, activePolls };
  }

  it("isolates an alternating fail/ok node for longer each time, up to the cap", () => {
    const { periods } = flap(1_000);
    expect(periods.slice(0, 6)).toEqual([30_000, 60_000, 120_000, 240_000, 480_000, 600_000]);
    expect(new Set(periods.slice(5))).toEqual(new Set([config.isolationMaxMs]));
  });

  it("lets a flapping node take traffic ever more rarely", () => {
    const { activePolls } = flap(1_000);
    const firstHalf = activePolls.filter((i) => i <= 500).length;
    const secondHalf = activePolls.filter((i) => i > 500).length;
    // Routable for a few polls before the first isolation, then about one poll per isolation.
    expect(activePolls.filter((i) => i <= 6)).toEqual([2, 4]);
    expect(secondHalf).toBeLessThan(firstHalf);
    expect(activePolls.length).toBeLessThan(20);
  });

  it("starts the backoff again after a period of stable Active", () => {
    const isolatedAt = T0 + 3 * POLL;
    let h = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    const recoveredAt = isolatedAt + config.isolationBaseMs;
    h = applyProbe(h, ok(), config, recoveredAt);

    const steadyPolls = config.stableResetMs / POLL;
    const steady = poll(
      h,
      Array.from({ length: steadyPolls }, () => ok()),
      recoveredAt,
    );
    expect(steady.isolations).toBe(0);
    const failAt = recoveredAt + steadyPolls * POLL;
    const stable = poll(steady, [FAIL, FAIL, FAIL], failAt);
    expect(stable.isolatedUntil).toBe(failAt + 3 * POLL + config.isolationBaseMs);

    // Counter-case: Active for under a minute (long enough to flush the probe window), so
    // the next isolation doubles.
    const oks = Array.from({ length: config.probeWindowSize }, () => ok());
    const brief = poll(h, [...oks, FAIL, FAIL, FAIL], recoveredAt);
    const isolatedAgainAt = recoveredAt + (oks.length + 3) * POLL;
    expect(brief.isolatedUntil).toBe(isolatedAgainAt + 2 * config.isolationBaseMs);
  });

  it("isolates a recovered node again on fewer failures while the outage is in its window", () => {
    const isolatedAt = T0 + 3 * POLL;
    let h = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    const recoveredAt = isolatedAt + config.isolationBaseMs;
    h = applyProbe(h, ok(), config, recoveredAt);
    h = poll(h, [ok(), ok(), FAIL], recoveredAt);
    expect(h).toMatchObject({ status: "Isolated", isolations: 2 });
  });
});

describe("error rate from dispatch observations", () => {
  function observe(health: NodeHealth, outcomes: readonly boolean[], from: number): NodeHealth {
    return outcomes.reduce(
      (h, failed, i) =>
        applyObservation(
          h,
          observation(from + i * 100, failed ? FIVE_XX : {}),
          config,
          from + i * 100,
        ),
      health,
    );
  }
  const half = Array.from({ length: 10 }, (_, i) => i % 2 === 0);

  it("demotes an Active node whose probes succeed once half its dispatches fail", () => {
    let h = activeNode();
    h = observe(h, half, T0 + 1);
    expect(h).toMatchObject({ status: "Degraded", consecutiveFailures: 0, errorRate: 0.5 });
    expect(isRoutable(h)).toBe(false);

    // Successful probes do not lift the demotion while the failures are inside the window.
    h = poll(h, [ok(), ok()], T0 + 1_000);
    expect(h.status).toBe("Degraded");

    // Once they age out of the window, the next successful probe restores it.
    h = applyProbe(h, ok(), config, T0 + 1 + config.errorWindowMs + POLL);
    expect(h).toMatchObject({ status: "Active", errorRate: 0 });
  });

  it("isolates a node whose dispatches fail at or above the isolation rate", () => {
    const mostlyFailing = Array.from({ length: 10 }, (_, i) => i < 9);
    const h = observe(activeNode(), mostlyFailing, T0 + 1);
    expect(h).toMatchObject({ status: "Isolated", isolations: 1 });
    expect(h.statusReason).toContain("error rate 90%");
  });

  it("does not judge the rate before the window holds enough dispatches, but scores it", () => {
    const h = observe(
      activeNode(),
      Array.from({ length: 9 }, () => true),
      T0 + 1,
    );
    expect(h.status).toBe("Active");
    expect(h.errorRate).toBeCloseTo(0.9);
    expect(h.healthScore).toBeLessThan(15);
  });

  it("does not count 4xx responses (including 429) against the node", () => {
    const clientErrors = [400, 404, 422, 429, 402];
    let h = activeNode();
    for (let i = 0; i < 20; i++) {
      const status = clientErrors[i % clientErrors.length] ?? 400;
      h = applyObservation(
        h,
        observation(T0 + i, { outcome: "http_error", status }),
        config,
        T0 + i,
      );
    }
    expect(h).toMatchObject({ status: "Active", errorRate: 0 });
  });

  it("keeps the last errorWindowMaxSize dispatches of the window, oldest dropped first", () => {
    const small: HealthConfig = { ...config, errorWindowMaxSize: 5 };
    let h = applyProbe(createNodeHealth(NODE, T0), ok(), small, T0);
    const before = h;
    for (let i = 1; i <= 8; i++) {
      h = applyObservation(h, observation(T0 + i), small, T0 + i);
    }
    expect(h.recentObservations.map((m) => m.at)).toEqual([4, 5, 6, 7, 8].map((i) => T0 + i));
    // The state applied to is never changed.
    expect(before.recentObservations).toEqual([]);
    // Marks older than the window leave it; an observation older than the window never enters.
    const later = T0 + 6 + small.errorWindowMs;
    h = applyObservation(h, observation(later - small.errorWindowMs - 1), small, later);
    expect(h.recentObservations.map((m) => m.at)).toEqual([7, 8].map((i) => T0 + i));
    h = applyObservation(h, observation(later), small, later);
    expect(h.recentObservations.map((m) => m.at)).toEqual([T0 + 7, T0 + 8, later]);
  });

  it("keeps the window the model says, for any order of marks and any size limit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 6 }),
        fc.array(fc.tuple(fc.integer({ min: -200, max: 200 }), fc.integer({ min: 0, max: 150 })), {
          maxLength: 30,
        }),
        (limit, steps) => {
          const small: HealthConfig = { ...config, errorWindowMs: 100, errorWindowMaxSize: limit };
          let h = applyProbe(createNodeHealth(NODE, T0), ok(), small, T0);
          let model: number[] = [];
          let now = T0;
          for (const [age, advance] of steps) {
            now += advance;
            h = applyObservation(h, observation(now - age), small, now);
            const inside = [...model, now - age].filter((at) => at > now - small.errorWindowMs);
            model = inside.slice(Math.max(0, inside.length - limit));
            expect(h.recentObservations.map((m) => m.at)).toEqual(model);
          }
        },
      ),
    );
  });

  it("counts network errors and timeouts as failures", () => {
    let h = activeNode();
    for (let i = 0; i < 10; i++) {
      const outcome = i % 2 === 0 ? "network_error" : "timeout";
      h = applyObservation(h, observation(T0 + i, { outcome, status: null }), config, T0 + i);
    }
    expect(h.status).toBe("Isolated");
  });

  it("isolates again when the probation probe after an error-rate isolation fails", () => {
    const isolated = observe(
      activeNode(),
      Array.from({ length: 10 }, () => true),
      T0 + 1,
    );
    expect(isolated.consecutiveFailures).toBe(0);
    const probationAt = (isolated.isolatedUntil ?? 0) + 1;
    const again = applyProbe(isolated, FAIL, config, probationAt);
    expect(again).toMatchObject({ status: "Isolated", isolations: 2 });
    expect(again.isolatedUntil).toBe(probationAt + 2 * config.isolationBaseMs);
  });

  it("forgives the errors that caused an isolation once the node is back", () => {
    const isolated = observe(
      activeNode(),
      Array.from({ length: 10 }, () => true),
      T0 + 1,
    );
    const back = applyProbe(isolated, ok(), config, T0 + 1 + config.isolationBaseMs + 1_000);
    expect(back).toMatchObject({ status: "Active", errorRate: 0, recentObservations: [] });
  });

  it("tracks latency and TTFT EWMAs and the last successful inference from ok dispatches", () => {
    let h = activeNode();
    h = applyObservation(
      h,
      observation(T0 + 10, { latency_ms: 100, ttft_ms: 40 }),
      config,
      T0 + 10,
    );
    h = applyObservation(
      h,
      observation(T0 + 20, { latency_ms: 200, ttft_ms: 80 }),
      config,
      T0 + 20,
    );
    h = applyObservation(
      h,
      observation(T0 + 30, { ...FIVE_XX, latency_ms: 9_000 }),
      config,
      T0 + 30,
    );
    expect(h.latencyEwmaMs).toBeCloseTo(100 + config.ewmaAlpha * 100);
    expect(h.ttftEwmaMs).toBeCloseTo(40 + config.ewmaAlpha * 40);
    expect(h.lastInferenceOkAt).toBe(T0 + 20);
  });

  it("refuses an observation for another node", () => {
    expect(() =>
      applyObservation(activeNode(), observation(T0, { node_id: "mi300x-b" }), config, T0),
    ).toThrow(NodeMismatchError);
  });
});

describe("tokens per second", () => {
  it("derives throughput from the generation counter between probes, skipping idle gaps", () => {
    let h = applyProbe(
      createNodeHealth(NODE, T0),
      ok({ generationTokensTotal: 1_000 }),
      config,
      T0,
    );
    expect(h.tokensPerSecond).toBeNull();
    h = applyProbe(h, ok({ generationTokensTotal: 2_000 }), config, T0 + 5_000);
    expect(h.tokensPerSecond).toBe(200);
    h = applyProbe(h, ok({ generationTokensTotal: 2_000 }), config, T0 + 10_000);
    expect(h.tokensPerSecond).toBe(200);
    h = applyProbe(h, ok({ generationTokensTotal: 3_500 }), config, T0 + 15_000);
    expect(h.tokensPerSecond).toBeCloseTo(200 + config.ewmaAlpha * (300 - 200));
    expect(h.tokensPerSecondHistory).toEqual([
      { at: T0 + 5_000, tokensPerSecond: 200 },
      { at: T0 + 15_000, tokensPerSecond: 300 },
    ]);
  });

  it("treats a counter that went backwards as a new baseline", () => {
    let h = applyProbe(
      createNodeHealth(NODE, T0),
      ok({ generationTokensTotal: 5_000 }),
      config,
      T0,
    );
    h = applyProbe(h, ok({ generationTokensTotal: 100 }), config, T0 + 5_000);
    expect(h.tokensPerSecond).toBeNull();
    h = applyProbe(h, ok({ generationTokensTotal: 600 }), config, T0 + 10_000);
    expect(h.tokensPerSecond).toBe(100);
  });
});

describe("one request's tokens per second", () => {
  const latency = (seconds: number, count: number) => ok({ tokenLatency: { seconds, count } });

  it("is Δcount / Δsum of the time-per-token histogram, whatever the node's load", () => {
    let h = applyProbe(createNodeHealth(NODE, T0), latency(10, 1_000), config, T0);
    expect(h.requestTokensPerSecond).toBeNull();
    // 100 tokens at 5 ms each: 200 tok/s for one request, however many ran beside it.
    h = applyProbe(h, latency(10.5, 1_100), config, T0 + POLL);
    expect(h.requestTokensPerSecond).toBeCloseTo(200);
    expect(toNodeState(h, T0 + POLL).request_tokens_per_second).toBeCloseTo(200);
    // No token in between measures nothing: the estimate is kept.
    h = applyProbe(h, latency(10.5, 1_100), config, T0 + 2 * POLL);
    expect(h.requestTokensPerSecond).toBeCloseTo(200);
    // Then 10 ms a token.
    h = applyProbe(h, latency(11.5, 1_200), config, T0 + 3 * POLL);
    expect(h.requestTokensPerSecond).toBeCloseTo(200 + config.ewmaAlpha * (100 - 200));
  });

  it("takes totals that went backwards as a new baseline, and keeps it when not reported", () => {
    let h = applyProbe(createNodeHealth(NODE, T0), latency(10, 1_000), config, T0);
    h = applyProbe(h, latency(0.1, 10), config, T0 + POLL);
    expect(h.requestTokensPerSecond).toBeNull();
    h = applyProbe(h, latency(0.3, 30), config, T0 + 2 * POLL);
    expect(h.requestTokensPerSecond).toBeCloseTo(100);
    h = applyProbe(h, ok({ tokenLatency: null }), config, T0 + 3 * POLL);
    expect(h.requestTokensPerSecond).toBeCloseTo(100);
    expect(h.lastTokenLatency).toBeNull();
  });
});

describe("identity", () => {
  it("starts a node reporting a new instance id afresh", () => {
    let h = applyProbe(
      createNodeHealth(NODE, T0),
      ok({ generationTokensTotal: 1_000 }),
      config,
      T0,
    );
    h = applyProbe(h, ok({ generationTokensTotal: 2_000 }), config, T0 + POLL);
    h = applyObservation(h, observation(T0 + POLL + 1, { latency_ms: 300 }), config, T0 + POLL + 1);
    h = poll(h, [FAIL, FAIL, FAIL], T0 + POLL);
    const probationAt = (h.isolatedUntil ?? 0) + 1;
    h = applyObservation(h, observation(probationAt - 2, FIVE_XX), config, probationAt - 2);
    expect(h).toMatchObject({ status: "Isolated", isolations: 1, instanceId: "inst-a" });

    const replaced = applyProbe(
      h,
      ok({ instanceId: "inst-b", generationTokensTotal: 10 }),
      config,
      h.isolatedUntil ?? 0,
    );
    expect(replaced).toMatchObject({
      instanceId: "inst-b",
      status: "Active",
      probePending: false,
      isolations: 0,
      consecutiveFailures: 0,
      recentProbeFailures: [false],
      recentObservations: [],
      latencyEwmaMs: null,
      tokensPerSecond: null,
      tokensPerSecondHistory: [],
      lastTokenCount: { at: h.isolatedUntil, generationTokensTotal: 10 },
    });
    expect(replaced.statusReason).toContain("inst-b");
  });

  it("starts fresh even inside an isolation period: the isolated process is gone", () => {
    const isolated = poll(activeNode(), [FAIL, FAIL, FAIL], T0);
    const replaced = applyProbe(isolated, ok({ instanceId: "inst-b" }), config, T0 + 4 * POLL);
    expect(replaced).toMatchObject({ status: "Active", isolations: 0 });
  });

  it("keeps history when the instance id is first learned or not reported", () => {
    let h = applyProbe(createNodeHealth(NODE, T0), ok({ instanceId: null }), config, T0);
    h = applyObservation(h, observation(T0 + 1), config, T0 + 1);
    h = applyProbe(h, ok({ instanceId: "inst-a" }), config, T0 + POLL);
    h = applyProbe(h, ok({ instanceId: null }), config, T0 + 2 * POLL);
    expect(h.instanceId).toBe("inst-a");
    expect(h.latencyEwmaMs).not.toBeNull();
  });
});

describe("NodeHealth values", () => {
  it("are never mutated and survive a JSON round trip", () => {
    let h = deepFreeze(activeNode());
    const steps: Array<(x: NodeHealth, now: number) => NodeHealth> = [
      (x, now) => applyProbe(x, ok({ generationTokensTotal: now / 1_000 }), config, now),
      (x, now) => applyObservation(x, observation(now, FIVE_XX), config, now),
      (x, now) => applyProbe(x, FAIL, config, now),
      (x, now) => applyObservation(x, observation(now), config, now),
    ];
    for (let i = 1; i <= 40; i++) {
      const step = steps[i % steps.length];
      if (step === undefined) throw new Error("unreachable");
      h = deepFreeze(step(h, T0 + i * 1_000));
      expect(JSON.parse(JSON.stringify(h))).toEqual(h);
    }
  });

  it("always map to a valid NodeState, whatever happens to the node", () => {
    const event = fc.oneof(
      fc.record({
        kind: fc.constant("probe" as const),
        ok: fc.boolean(),
        running: fc.nat(64),
        waiting: fc.nat(64),
        kv: fc.option(fc.double({ min: 0, max: 1, noNaN: true })),
        tokens: fc.option(fc.nat(1_000_000)),
        instance: fc.constantFrom("inst-a", "inst-b", null),
      }),
      fc.record({
        kind: fc.constant("observation" as const),
        outcome: fc.constantFrom("ok", "http_error", "network_error", "timeout"),
        status: fc.option(fc.integer({ min: 100, max: 599 })),
        latency: fc.double({ min: 0, max: 60_000, noNaN: true }),
      }),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(event, fc.nat(20_000)), { maxLength: 80 }), (events) => {
        let now = T0;
        let h = createNodeHealth(NODE, now);
        for (const [e, gap] of events) {
          now += gap;
          h =
            e.kind === "probe"
              ? applyProbe(
                  h,
                  e.ok
                    ? ok({
                        running: e.running,
                        waiting: e.waiting,
                        kvCacheUsage: e.kv,
                        generationTokensTotal: e.tokens,
                        instanceId: e.instance,
                      })
                    : FAIL,
                  config,
                  now,
                )
              : applyObservation(
                  h,
                  observation(now, { outcome: e.outcome, status: e.status, latency_ms: e.latency }),
                  config,
                  now,
                );
          expectValidState(h, now);
          if (isRoutable(h)) expect(h.status).toBe("Active");
          if (h.status === "Isolated") expect(h.probePending).toBe(false);
          if (h.probePending) expect(isRoutable(h)).toBe(false);
        }
      }),
    );
  });
});
