import { createHash } from "node:crypto";
import type { AccountSpec, InferencePath, ModelSpec, PolicySpec } from "@zml/contracts";
import { HEADERS, ZmlError } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createAdminAuthenticator, createAuthenticator } from "../src/admission/auth.ts";
import { createKeyStoreStatus } from "../src/admission/key-store.ts";
import { policyNameFor } from "../src/request/policy.ts";
import { createRateLimiter } from "../src/admission/rate-limit.ts";
import { extractRouteFields, parseNativeCall, routeFieldsOf } from "../src/request/route-fields.ts";
import type { RouteFields } from "../src/request/route-fields.ts";
import { planHeaders, planRoute } from "../src/request/route-plan.ts";

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const account = (extra: Partial<AccountSpec> = {}): AccountSpec => ({
  id: "acct",
  api_key_sha256: [sha("key-1")],
  allowed_tiers: [1],
  ...extra,
});

function codeOf(fn: () => unknown): [string, string | null] {
  try {
    fn();
  } catch (e) {
    if (e instanceof ZmlError) return [e.code, e.param];
    throw e;
  }
  throw new Error("did not throw");
}

function loadedKeyStore(maxStaleMs = 1_000) {
  const ks = createKeyStoreStatus(maxStaleMs);
  ks.markLoaded();
  return ks;
}

describe("authenticator", () => {
  const auth = createAuthenticator(loadedKeyStore());
  auth.reindex([account()]);

  it("accepts a known key and rejects everything else with 401", () => {
    expect(auth.authenticate("Bearer key-1", 0).id).toBe("acct");
    expect(auth.authenticate("bearer   key-1 ", 0).id).toBe("acct");
    for (const h of [
      undefined,
      "",
      "Bearer",
      "Bearer key-2",
      "Basic a2V5LTE=",
      "Bearer key-1\r\nx: y",
      `Bearer ${"k".repeat(600)}`,
    ]) {
      expect(codeOf(() => auth.authenticate(h, 0))).toEqual(["unauthorized", "authorization"]);
    }
  });

  it("forgets keys removed by a re-index", () => {
    auth.reindex([account({ api_key_sha256: [sha("key-2")] })]);
    expect(codeOf(() => auth.authenticate("Bearer key-1", 0))[0]).toBe("unauthorized");
    expect(auth.authenticate("Bearer key-2", 0).id).toBe("acct");
  });

  it("answers 503, never 401, while the key store cannot be trusted", () => {
    const ks = createKeyStoreStatus(1_000);
    const a = createAuthenticator(ks);
    a.reindex([account()]);
    // Not loaded yet: neither a good nor a bad key gets a verdict.
    expect(codeOf(() => a.authenticate("Bearer key-1", 0))[0]).toBe("key_store_unavailable");
    expect(codeOf(() => a.authenticate("Bearer nope", 0))[0]).toBe("key_store_unavailable");
    ks.markLoaded();
    expect(a.authenticate("Bearer key-1", 0).id).toBe("acct");
    // Disconnected: the copy serves within the bound, then is distrusted.
    ks.connectionChanged(false, 10_000);
    expect(a.authenticate("Bearer key-1", 10_999).id).toBe("acct");
    expect(codeOf(() => a.authenticate("Bearer nope", 10_999))[0]).toBe("unauthorized");
    expect(codeOf(() => a.authenticate("Bearer key-1", 11_000))[0]).toBe("key_store_unavailable");
    expect(codeOf(() => a.authenticate("Bearer nope", 12_000))[0]).toBe("key_store_unavailable");
    // A second disconnect event does not restart the clock; a reconnect does.
    ks.connectionChanged(false, 11_500);
    expect(codeOf(() => a.authenticate("Bearer key-1", 11_600))[0]).toBe("key_store_unavailable");
    ks.connectionChanged(true, 13_000);
    expect(a.authenticate("Bearer key-1", 99_000).id).toBe("acct");
    // A missing credential is a 401 whatever the store's state.
    ks.connectionChanged(false, 0);
    expect(codeOf(() => a.authenticate(undefined, 99_000))[0]).toBe("unauthorized");
  });
});

describe("admin authenticator", () => {
  const check = createAdminAuthenticator("admin-token-0123456789");
  it("accepts only the exact token", () => {
    expect(() => check("Bearer admin-token-0123456789")).not.toThrow();
    for (const h of [
      undefined,
      "Bearer admin-token-012345678",
      "Bearer admin-token-01234567890",
      "admin-token-0123456789",
    ]) {
      expect(codeOf(() => check(h))).toEqual(["unauthorized", "authorization"]);
    }
  });
});

describe("rate limiter", () => {
  it("allows the burst, then refills at the configured rate", () => {
    const rl = createRateLimiter();
    const limit = { requests_per_minute: 60, burst: 2 };
    expect(rl.take("a", limit, 0)).toEqual({ ok: true });
    expect(rl.take("a", limit, 0)).toEqual({ ok: true });
    expect(rl.take("a", limit, 0)).toEqual({ ok: false, retryAfterS: 1 });
    expect(rl.take("b", limit, 0).ok).toBe(true); // buckets are per account
    expect(rl.take("a", limit, 999).ok).toBe(false);
    expect(rl.take("a", limit, 1_000).ok).toBe(true);
    expect(rl.take("a", undefined, 1_000).ok).toBe(true); // no limit, no bucket
  });

  it("computes Retry-After from the refill rate and honours a lowered limit", () => {
    const rl = createRateLimiter();
    expect(rl.take("a", { requests_per_minute: 1 }, 0).ok).toBe(true);
    expect(rl.take("a", { requests_per_minute: 1 }, 0)).toEqual({ ok: false, retryAfterS: 60 });
    const fresh = createRateLimiter();
    for (let i = 0; i < 10; i++) fresh.take("a", { requests_per_minute: 600 }, 0);
    // 590 tokens left, capped at the new burst of 1.
    expect(fresh.take("a", { requests_per_minute: 600, burst: 1 }, 0).ok).toBe(true);
    expect(fresh.take("a", { requests_per_minute: 600, burst: 1 }, 0).ok).toBe(false);
  });

  it("forgets deleted accounts", () => {
    const rl = createRateLimiter();
    const limit = { requests_per_minute: 1 };
    rl.take("a", limit, 0);
    rl.retain(new Set());
    expect(rl.take("a", limit, 0).ok).toBe(true);
  });
});

/** The routing fields of a body that names nothing but its model. */
const plainFields = (model: string): RouteFields => ({
  model,
  stream: false,
  tier: 1,
  policy: undefined,
  acceleratorHint: undefined,
  fallbackModels: [],
  sort: undefined,
  sessionId: undefined,
  maxTokens: undefined,
});

describe("extractRouteFields", () => {
  const buf = (v: unknown) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v));
  const ok = { model: "m", messages: [{ role: "user", content: "hi" }] };

  it("takes max_tokens (or max_completion_tokens) as the expected output, only when usable", () => {
    const fields = (extra: Record<string, unknown>) =>
      extractRouteFields("/v1/chat/completions", buf({ ...ok, ...extra }));
    expect(fields({ max_tokens: 4000 }).maxTokens).toBe(4000);
    expect(fields({ max_completion_tokens: 16 }).maxTokens).toBe(16);
    // Not validated here (the node answers for its own parameters): routing ignores it.
    expect(fields({ max_tokens: "lots" }).maxTokens).toBeUndefined();
    expect(fields({ max_tokens: 0 }).maxTokens).toBeUndefined();
  });

  it("reads routing fields and defaults", () => {
    expect(extractRouteFields("/v1/chat/completions", buf(ok))).toEqual(plainFields("m"));
    expect(
      extractRouteFields(
        "/v1/chat/completions",
        buf({
          ...ok,
          stream: true,
          tier: 2,
          policy: "p",
          accelerator_hint: "MI300X",
          unknown: 1,
          models: ["x", "y"],
          provider: { sort: "quality", other: 1 },
          session_id: "s-1",
        }),
      ),
    ).toEqual({
      model: "m",
      stream: true,
      tier: 2,
      policy: "p",
      acceleratorHint: "MI300X",
      fallbackModels: ["x", "y"],
      sort: "quality",
      sessionId: "s-1",
    });
    expect(extractRouteFields("/v1/completions", buf({ model: "m", prompt: "x" })).model).toBe("m");
  });

  it("digests a prompt of at least one block for prefix affinity, in the engine's order", () => {
    const system = { role: "system", content: "Secret house rules. ".repeat(100) };
    const chat = (turn: string) =>
      extractRouteFields(
        "/v1/chat/completions",
        buf({ model: "m", messages: [system, { role: "user", content: turn }] }),
      ).prefix!;
    const a = chat("first");
    const b = chat("second");
    expect(a.chars).toBeGreaterThan(2000);
    expect(a.digests.length).toBe(Math.floor(a.chars / 256));
    expect(Array.from(a.digests.slice(0, 7))).toEqual(Array.from(b.digests.slice(0, 7)));
    expect(extractRouteFields("/v1/chat/completions", buf(ok)).prefix).toBeUndefined();
    const long = "p".repeat(600);
    expect(
      extractRouteFields("/v1/completions", buf({ model: "m", prompt: long })).prefix,
    ).toBeDefined();
    expect(
      extractRouteFields("/v1/responses", buf({ model: "m", instructions: long, input: "q" }))
        .prefix,
    ).toBeDefined();
    expect(
      extractRouteFields("/v1/embeddings", buf({ model: "m", input: long })).prefix,
    ).toBeUndefined();
    expect(parseNativeCall(buf({ model: "m", messages: [system] })).fields.prefix).toBeDefined();
  });

  it("sends digests only, and never for tier 4", () => {
    const system = { role: "system", content: "Secret house rules. ".repeat(100) };
    const fields = extractRouteFields(
      "/v1/chat/completions",
      buf({ model: "m", tier: 2, messages: [system] }),
    );
    const plan = { model: "m", fallbackModels: [], policy: "balanced", tier: 2 };
    const header = planHeaders(
      "route.request.v1",
      "/v1/chat/completions",
      fields,
      plan,
      account(),
    ).get(HEADERS.prefix);
    expect(header).toMatch(/^\d+:[A-Za-z0-9_-]+$/);
    expect(header).not.toMatch(/Secret|house|rules/);
    const tier4 = planHeaders(
      "route.request.v1",
      "/v1/chat/completions",
      fields,
      { ...plan, tier: 4 },
      account(),
    );
    expect(tier4.get(HEADERS.prefix)).toBe("");
  });

  it.each([
    ["{", "invalid_json", "body"],
    ["[1]", "invalid_request", "body"],
    ["null", "invalid_request", "body"],
    [JSON.stringify({ messages: [] }), "invalid_request", "model"],
    [JSON.stringify({ model: "m" }), "invalid_request", "messages"],
    [JSON.stringify({ model: 7, messages: [{ role: "user" }] }), "invalid_request", "model"],
    [JSON.stringify({ ...ok, messages: [{ content: "x" }] }), "invalid_request", "messages.0.role"],
    [JSON.stringify({ ...ok, stream: "yes" }), "invalid_request", "stream"],
    [JSON.stringify({ ...ok, tier: 0 }), "invalid_request", "tier"],
    [
      JSON.stringify({ ...ok, accelerator_hint: "H100\r\nZml-Tier: 4" }),
      "invalid_request",
      "accelerator_hint",
    ],
    [JSON.stringify({ ...ok, session_id: "a b" }), "invalid_request", "session_id"],
    [JSON.stringify({ ...ok, provider: { sort: "cheapest" } }), "invalid_request", "provider.sort"],
    [JSON.stringify({ ...ok, models: "m2" }), "invalid_request", "models"],
  ])("names the field for %s", (body, code, param) => {
    expect(codeOf(() => extractRouteFields("/v1/chat/completions", Buffer.from(body)))).toEqual([
      code,
      param,
    ]);
  });

  it("reads an already parsed body (a job's request) as it reads the same body's bytes", () => {
    const system = { role: "system", content: "Secret house rules. ".repeat(100) };
    const bodies: [InferencePath, Record<string, unknown>][] = [
      [
        "/v1/chat/completions",
        { ...ok, messages: [system], tier: 2, models: ["n"], max_tokens: 9 },
      ],
      ["/v1/completions", { model: "m", prompt: "p".repeat(600), provider: { sort: "price" } }],
      ["/v1/embeddings", { model: "m", input: "x", stream: true }],
    ];
    for (const [path, body] of bodies) {
      const fields = routeFieldsOf(path, body);
      expect(fields).toEqual(extractRouteFields(path, buf(body)));
    }
    expect(routeFieldsOf("/v1/chat/completions", bodies[0]![1]).prefix).toBeDefined();
    for (const bad of [
      { messages: [] },
      { model: 7, messages: [{ role: "user" }] },
      { ...ok, messages: [{ content: "x" }] },
      { ...ok, tier: 0 },
      { ...ok, provider: { sort: "cheapest" } },
    ]) {
      expect(codeOf(() => routeFieldsOf("/v1/chat/completions", bad))).toEqual(
        codeOf(() => extractRouteFields("/v1/chat/completions", buf(bad))),
      );
    }
  });
});

describe("parseNativeCall", () => {
  const buf = (v: unknown) => Buffer.from(JSON.stringify(v));
  const messages = [{ role: "user", content: "hi" }];

  it("moves routing fields to the route and keeps generation fields for the node", () => {
    const call = parseNativeCall(
      buf({
        model: "m",
        messages,
        stream: true,
        tier: 2,
        policy: "p",
        accelerator_hint: "H100",
        fallback_models: ["n"],
        sort: "price",
        session_id: "s",
        max_tokens: 5,
        temperature: 0.5,
      }),
    );
    expect(call.path).toBe("/v1/chat/completions");
    expect(JSON.parse(call.body.toString())).toEqual({
      model: "m",
      messages,
      stream: true,
      max_tokens: 5,
      temperature: 0.5,
    });
    expect(call.fields).toEqual({
      model: "m",
      stream: true,
      tier: 2,
      policy: "p",
      acceleratorHint: "H100",
      fallbackModels: ["n"],
      sort: "price",
      sessionId: "s",
      maxTokens: 5,
    });
  });

  it("rejects unknown fields, naming them", () => {
    expect(codeOf(() => parseNativeCall(buf({ model: "m", messages, temprature: 1 })))).toEqual([
      "invalid_request",
      "temprature",
    ]);
    expect(
      codeOf(() => parseNativeCall(buf({ model: "m", messages, fallback_models: [1] }))),
    ).toEqual(["invalid_request", "fallback_models.0"]);
  });
});

const policy = (name: string): PolicySpec => ({
  name,
  accelerator_preference: [{ family: "H100", priority: 1 }],
  latency_target_ms: 1000,
  cost_priority: "latency",
  queue_on_saturation: false,
  max_queue_ms: 0,
});

describe("policyNameFor", () => {
  const policies = new Map([
    ["fast", policy("fast")],
    ["cheap", policy("cheap")],
  ]);
  const model = (default_policy?: string): ModelSpec => ({
    id: "m",
    ...(default_policy ? { default_policy } : {}),
  });
  const config = (m: ModelSpec) => ({ models: new Map([[m.id, m]]), policies });

  it("follows request → model default → account default → balanced", () => {
    expect(
      policyNameFor("cheap", "m", account({ default_policy: "fast" }), config(model("fast"))),
    ).toBe("cheap");
    expect(
      policyNameFor(undefined, "m", account({ default_policy: "cheap" }), config(model("fast"))),
    ).toBe("fast");
    expect(
      policyNameFor(undefined, "m", account({ default_policy: "cheap" }), config(model())),
    ).toBe("cheap");
    expect(policyNameFor(undefined, "m", account(), config(model()))).toBe("balanced");
    expect(policyNameFor(undefined, "m", account(), config(model("deleted")))).toBe("balanced");
  });

  it("rejects an unknown policy named by the request", () => {
    expect(codeOf(() => policyNameFor("nope", "m", account(), config(model())))).toEqual([
      "unknown_policy",
      "policy",
    ]);
  });
});

describe("planRoute", () => {
  const models = new Map<string, ModelSpec>([
    ["a", { id: "a" }],
    ["b", { id: "b" }],
    ["c", { id: "c" }],
  ]);
  const policies = new Map([["fast", policy("fast")]]);
  const fields = (extra: Partial<RouteFields> = {}) => ({ ...plainFields("a"), ...extra });

  it("keeps distinct fallbacks in order, without the primary model", () => {
    expect(
      planRoute(
        fields({ fallbackModels: ["b", "a", "c", "b"] }),
        account(),
        models,
        policies,
        "models",
      ),
    ).toEqual({
      model: "a",
      fallbackModels: ["b", "c"],
      policy: "balanced",
      tier: 1,
    });
  });

  it("names the field of an unknown model, a forbidden tier and an unknown policy", () => {
    expect(
      codeOf(() => planRoute(fields({ model: "x" }), account(), models, policies, "models")),
    ).toEqual(["unknown_model", "model"]);
    expect(
      codeOf(() =>
        planRoute(fields({ fallbackModels: ["b", "x"] }), account(), models, policies, "models"),
      ),
    ).toEqual(["unknown_model", "models.1"]);
    expect(
      codeOf(() =>
        planRoute(
          fields({ fallbackModels: ["x"] }),
          account(),
          models,
          policies,
          "fallback_models",
        ),
      ),
    ).toEqual(["unknown_model", "fallback_models.0"]);
    expect(
      codeOf(() => planRoute(fields({ tier: 3 }), account(), models, policies, "models")),
    ).toEqual(["tier_not_allowed", "tier"]);
    expect(
      codeOf(() => planRoute(fields({ policy: "slow" }), account(), models, policies, "models")),
    ).toEqual(["unknown_policy", "policy"]);
  });
});
