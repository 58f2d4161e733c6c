import { PolicySpecSchema } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { buildSnapshot, compilePolicy, resolvePolicy, type Rejection } from "../src/index.ts";
import { node, policySpec } from "./fixtures.ts";

const nodes = [
  node("m1", { accelerator_family: "MI300X", registered_at: 2 }),
  node("h1", { accelerator_family: "H100", registered_at: 1 }),
  node("a1", { accelerator_family: "A100", registered_at: 3 }),
  node("h2", { accelerator_family: "H100", registered_at: 4 }),
];

describe("policy resolution", () => {
  const snapshot = buildSnapshot({
    nodes,
    models: [
      { id: "with-default", default_policy: "fast" },
      { id: "dangling", default_policy: "gone" },
      { id: "plain" },
    ],
    policies: [
      policySpec({ name: "fast", cost_priority: "latency" }),
      policySpec({ name: "cheap", cost_priority: "cost" }),
    ],
  });
  const resolve = (request: { policy?: string; model: string }, account = {}) => {
    const r = resolvePolicy(snapshot, request, account);
    if (!r.ok) throw new Error(r.detail);
    return [r.source, r.policy.name];
  };

  it("takes the request's policy first", () => {
    expect(resolve({ policy: "cheap", model: "with-default" }, { default_policy: "fast" })).toEqual(
      ["request", "cheap"],
    );
  });

  it("then the model's default, then the account's", () => {
    expect(resolve({ model: "with-default" }, { default_policy: "cheap" })).toEqual([
      "model",
      "fast",
    ]);
    expect(resolve({ model: "plain" }, { default_policy: "cheap" })).toEqual(["account", "cheap"]);
  });

  it("falls back to balanced over the families in registration order", () => {
    const [source, name] = resolve({ model: "plain" });
    expect([source, name]).toEqual(["default", "balanced"]);
    const r = resolvePolicy(snapshot, { model: "plain" });
    expect(r.ok && r.policy.chain).toEqual(["H100", "MI300X", "A100"]);
    expect(r.ok && r.policy.costPriority).toBe("balanced");
    expect(r.ok && r.policy.queueOnSaturation).toBe(false);
  });

  it("a dangling model or account default falls through and is reported", () => {
    expect(resolve({ model: "dangling" }, { default_policy: "also-gone" })).toEqual([
      "default",
      "balanced",
    ]);
    expect(snapshot.warnings).toContain("model dangling defaults to unknown policy gone");
  });

  it("rejects a policy the request names but nobody registered", () => {
    const r = resolvePolicy(snapshot, { policy: "nope", model: "plain" }) as Rejection;
    expect(r).toMatchObject({ ok: false, reason: "unknown_policy", code: "unknown_policy" });
    expect(r.retryAfterS).toBeUndefined();
  });

  it("`balanced` by name is the built-in one unless an operator registered their own", () => {
    expect(resolve({ policy: "balanced", model: "plain" })).toEqual(["request", "balanced"]);
    const own = buildSnapshot({
      nodes,
      policies: [policySpec({ name: "balanced", latency_target_ms: 42 })],
    });
    const r = resolvePolicy(own, { model: "plain" });
    expect(r.ok && r.policy.latencyTargetMs).toBe(42);
  });
});

describe("compilePolicy", () => {
  it("accepts the walkthrough's YAML shape verbatim", () => {
    // The walkthrough's policy, as the YAML parser hands it over.
    const fromYaml = {
      name: "low-latency-chat",
      accelerator_preference: [
        { family: "MI300X", priority: 2 },
        { family: "H100", priority: 1 },
        { family: "L40S", priority: 3 },
      ],
      latency_target_ms: 800,
      cost_priority: "balanced",
      queue_on_saturation: true,
      max_queue_ms: 2000,
    };
    const compiled = compilePolicy(PolicySpecSchema.parse(fromYaml));
    expect(compiled).toMatchObject({
      name: "low-latency-chat",
      chain: ["H100", "MI300X", "L40S"],
      latencyTargetMs: 800,
      costPriority: "balanced",
      queueOnSaturation: true,
      maxQueueMs: 2000,
    });
  });

  it("keeps list order among equal priorities and drops repeated families", () => {
    const compiled = compilePolicy(
      policySpec({
        accelerator_preference: [
          { family: "B", priority: 1 },
          { family: "A", priority: 1 },
          { family: "B", priority: 0 },
        ],
      }),
    );
    expect(compiled.chain).toEqual(["B", "A"]);
  });

  it("max_queue_ms only counts when queueing on saturation is on", () => {
    expect(
      compilePolicy(policySpec({ queue_on_saturation: false, max_queue_ms: 500 })).maxQueueMs,
    ).toBe(0);
  });
});

describe("policy resolution over names only (intake's view)", () => {
  const catalog = {
    policies: new Map([["fast", { name: "fast" }]]),
    models: new Map([
      ["m", { default_policy: "fast" }],
      ["plain", {}],
    ]),
    defaultPolicy: { name: "balanced" },
  };

  it("accepts the built-in default by name though nobody registered it", () => {
    const r = resolvePolicy(catalog, { policy: "balanced", model: "plain" });
    expect(r).toMatchObject({ ok: true, source: "request", policy: { name: "balanced" } });
  });

  it("resolves the same order as over a snapshot", () => {
    expect(resolvePolicy(catalog, { model: "m" })).toMatchObject({ source: "model" });
    expect(resolvePolicy(catalog, { model: "plain" }, { default_policy: "fast" })).toMatchObject({
      source: "account",
      policy: { name: "fast" },
    });
    expect(resolvePolicy(catalog, { model: "plain" })).toMatchObject({ source: "default" });
    expect(resolvePolicy(catalog, { policy: "nope", model: "m" })).toMatchObject({
      ok: false,
      code: "unknown_policy",
    });
  });
});
