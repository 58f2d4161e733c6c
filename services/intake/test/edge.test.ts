import { createHash } from "node:crypto";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { ZmlError } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createAuthenticator } from "../src/auth.ts";
import { resolvePolicyName } from "../src/policy.ts";
import { extractRouteFields } from "../src/route-fields.ts";

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

describe("authenticator", () => {
  const auth = createAuthenticator();
  auth.reindex([account()]);

  it("accepts a known key and rejects everything else with 401", () => {
    expect(auth.authenticate("Bearer key-1").id).toBe("acct");
    expect(auth.authenticate("bearer   key-1 ").id).toBe("acct");
    for (const h of [undefined, "", "Bearer", "Bearer key-2", "Basic a2V5LTE=", "Bearer key-1\r\nx: y", `Bearer ${"k".repeat(600)}`]) {
      expect(codeOf(() => auth.authenticate(h))).toEqual(["unauthorized", "authorization"]);
    }
  });

  it("forgets keys removed by a re-index", () => {
    auth.reindex([account({ api_key_sha256: [sha("key-2")] })]);
    expect(codeOf(() => auth.authenticate("Bearer key-1"))[0]).toBe("unauthorized");
    expect(auth.authenticate("Bearer key-2").id).toBe("acct");
  });
});

describe("extractRouteFields", () => {
  const buf = (v: unknown) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v));
  const ok = { model: "m", messages: [{ role: "user", content: "hi" }] };

  it("reads routing fields and defaults", () => {
    expect(extractRouteFields("/v1/chat/completions", buf(ok))).toEqual({
      model: "m",
      stream: false,
      tier: 1,
      policy: undefined,
      acceleratorHint: undefined,
    });
    expect(
      extractRouteFields("/v1/chat/completions", buf({ ...ok, stream: true, tier: 2, policy: "p", accelerator_hint: "MI300X", unknown: 1 })),
    ).toEqual({ model: "m", stream: true, tier: 2, policy: "p", acceleratorHint: "MI300X" });
    expect(extractRouteFields("/v1/completions", buf({ model: "m", prompt: "x" })).model).toBe("m");
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
  ])("names the field for %s", (body, code, param) => {
    expect(codeOf(() => extractRouteFields("/v1/chat/completions", Buffer.from(body)))).toEqual([code, param]);
  });
});

describe("resolvePolicyName", () => {
  const policy = (name: string): PolicySpec => ({
    name,
    accelerator_preference: [{ family: "H100", priority: 1 }],
    latency_target_ms: 1000,
    cost_priority: "latency",
    queue_on_saturation: false,
    max_queue_ms: 0,
  });
  const policies = new Map([["fast", policy("fast")], ["cheap", policy("cheap")]]);
  const model = (default_policy?: string): ModelSpec => ({ id: "m", ...(default_policy ? { default_policy } : {}) });

  it("follows request → model default → account default → balanced", () => {
    expect(resolvePolicyName("cheap", model("fast"), account({ default_policy: "fast" }), policies)).toBe("cheap");
    expect(resolvePolicyName(undefined, model("fast"), account({ default_policy: "cheap" }), policies)).toBe("fast");
    expect(resolvePolicyName(undefined, model(), account({ default_policy: "cheap" }), policies)).toBe("cheap");
    expect(resolvePolicyName(undefined, model(), account(), policies)).toBe("balanced");
    expect(resolvePolicyName(undefined, model("deleted"), account(), policies)).toBe("balanced");
  });

  it("rejects an unknown policy named by the request", () => {
    expect(codeOf(() => resolvePolicyName("nope", model(), account(), policies))).toEqual(["unknown_policy", "policy"]);
  });
});
