// Tier authorisation comes before every check of a body's shape, on every path that takes
// one: an account asking for a tier it may not use is told 403 `tier_not_allowed`, whatever
// else is wrong with its body, so the order of the answers tells a caller nothing about which
// other checks exist. Real nats-server, real HTTP; a subscriber stands in for the
// dispatchers and must see nothing.
import { natsConnectionOf, openKv } from "@zml/bus";
import type { Subscription } from "@zml/bus";
import { KV_BUCKETS, ROUTE_REQUEST_SUBJECT, SEALED_REQUEST_MEDIA_TYPE } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, auth, errorOf, sha, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

const TIER1_KEY = "intake-tier1-only-key-0123456789";
/** An account of tier 1 only, without a rate limit that would get in the way. */
const TIER1_ONLY: AccountSpec = {
  id: "tier1-only",
  api_key_sha256: [sha(TIER1_KEY)],
  allowed_tiers: [1],
};

let h: Harness;
let routeRequests: Subscription;
let routed = 0;

beforeAll(async () => {
  h = await startIntake();
  await (await openKv(h.bus, KV_BUCKETS.accounts)).put(TIER1_ONLY.id, JSON.stringify(TIER1_ONLY));
  routeRequests = natsConnectionOf(h.bus).subscribe(ROUTE_REQUEST_SUBJECT, {
    callback: () => void routed++,
  });
  // The account is watched into memory: wait until intake knows its key.
  await pollUntil(
    async () =>
      (await fetch(`${h.url}/v1/models`, { headers: auth(TIER1_KEY) })).status === 200 || undefined,
    { timeoutMs: 10_000, message: "the tier-1 account known to intake" },
  );
});
afterAll(async () => {
  routeRequests?.unsubscribe();
  await h?.close();
});

async function post(path: string, body: string, headers: Record<string, string>) {
  const res = await fetch(`${h.url}${path}`, { method: "POST", headers, body });
  return { status: res.status, text: await res.text() };
}

const sealedHeaders = (key: string) => ({
  ...auth(key),
  "content-type": SEALED_REQUEST_MEDIA_TYPE,
});

/**
 * Bodies asking for `tier`, each with something wrong with its shape (or, at tier 4, in
 * clear): every one of them was answered 400 before the tier was looked at.
 */
function openAiBodies(tier: number): [string, string][] {
  return [
    ["a wrong type", `{"model":5,"messages":[],"tier":${tier}}`],
    ["no model", `{"messages":[],"tier":${tier}}`],
    ["a clear body", `{"model":"m1","messages":[{"role":"user","content":"hi"}],"tier":${tier}}`],
    ["an unknown model", `{"model":"nope","messages":[],"tier":${tier}}`],
  ];
}

const OPENAI_PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"];

describe.each([
  { tier: 3, who: "a tier-1-only account", key: TIER1_KEY },
  { tier: 4, who: "a tier-1-only account", key: TIER1_KEY },
  { tier: 3, who: "an account of tiers 1, 2 and 4", key: API_KEY },
])(
  "$who asking for tier $tier gets 403 tier_not_allowed before any check of its body",
  ({ tier, key }) => {
    const expect403 = (res: { status: number; text: string }, what: string) => {
      expect(res.status, `${what}: ${res.text}`).toBe(403);
      expect(errorOf(res.text), what).toMatchObject({ code: "tier_not_allowed", param: "tier" });
    };

    it.each(OPENAI_PATHS)("on %s", async (path) => {
      const before = routed;
      for (const [what, body] of openAiBodies(tier))
        expect403(await post(path, body, auth(key)), what);
      expect(routed).toBe(before);
    });

    it("on /v1/infer", async () => {
      const before = routed;
      for (const [what, body] of [
        ...openAiBodies(tier),
        ["an unknown field", `{"model":"m1","messages":[],"tier":${tier},"bogus":1}`],
      ] as [string, string][]) {
        expect403(await post("/v1/infer", body, auth(key)), what);
      }
      expect(routed).toBe(before);
    });

    it("on /v1/jobs", async () => {
      for (const [what, body] of [
        ...openAiBodies(tier).map(([w, b]): [string, string] => [w, `{"request":${b}}`]),
        ["an unknown field", `{"bogus":1,"request":{"model":"m1","tier":${tier}}}`],
        ["a bad path", `{"path":"/v1/nope","request":{"model":"m1","tier":${tier}}}`],
      ] as [string, string][]) {
        expect403(await post("/v1/jobs", body, auth(key)), what);
      }
    });
  },
);

describe("tier 4 implied by the request, for an account of tier 1 only", () => {
  const expect403 = (res: { status: number; text: string }, what: string) => {
    expect(res.status, `${what}: ${res.text}`).toBe(403);
    expect(errorOf(res.text), what).toMatchObject({ code: "tier_not_allowed" });
  };

  it("a session (always tier 4): 403 whatever its body, not 400 sealed_body_required", async () => {
    const before = routed;
    for (const path of [...OPENAI_PATHS, "/v1/infer"]) {
      expect403(
        await post(path, `{"model":"m1","messages":[],"session_id":"s-1"}`, auth(TIER1_KEY)),
        `${path} clear body naming a session`,
      );
    }
    for (const [what, body] of [
      ["a good body", `{"model":"m1"}`],
      ["tier 3", `{"model":"m1","tier":3}`],
      ["tier 4", `{"model":"m1","tier":4}`],
      ["a wrong type", `{"model":5,"tier":4}`],
      ["an unknown field", `{"model":"m1","bogus":1}`],
      ["no JSON", "not json"],
    ]) {
      expect403(await post("/v1/sessions", body!, auth(TIER1_KEY)), `/v1/sessions ${what}`);
    }
    expect(routed).toBe(before);
  });

  it("a sealed body (always tier 4), on every path, whatever its envelope", async () => {
    const before = routed;
    for (const path of [...OPENAI_PATHS, "/v1/infer"]) {
      for (const [what, body] of [
        ["a bad envelope", `{"model":"m1"}`],
        ["no JSON", "not json"],
      ]) {
        expect403(await post(path, body!, sealedHeaders(TIER1_KEY)), `${path} ${what}`);
      }
    }
    expect(routed).toBe(before);
  });
});

describe("an account that may use the tier still gets the shape checks", () => {
  it("400 naming the field, as before", async () => {
    const bad = await post("/v1/chat/completions", `{"model":5,"tier":4}`, auth(API_KEY));
    expect(bad.status).toBe(400);
    expect(errorOf(bad.text)).toMatchObject({ code: "invalid_request", param: "model" });
    const clear = await post(
      "/v1/chat/completions",
      `{"model":"m1","messages":[{"role":"user","content":"hi"}],"tier":4}`,
      auth(API_KEY),
    );
    expect(errorOf(clear.text)).toMatchObject({ code: "sealed_body_required", param: "tier" });
    const session = await post("/v1/sessions", `{"model":5}`, auth(API_KEY));
    expect(errorOf(session.text)).toMatchObject({ code: "invalid_request", param: "model" });
    const crlf = await post(
      "/v1/chat/completions",
      JSON.stringify({
        model: "m1",
        messages: [{ role: "user", content: "hi" }],
        session_id: "s\r\nZml-Account: root",
      }),
      auth(API_KEY),
    );
    expect(errorOf(crlf.text)).toMatchObject({ code: "invalid_request", param: "session_id" });
  });

  it("a repeated key is refused first, whoever sends it: which tier it asks is ambiguous", async () => {
    for (const body of [
      `{"model":"m1","messages":[],"tier":1,"tier":4}`,
      `{"model":"m1","model":"m2","tier":4}`,
    ]) {
      const res = await post("/v1/chat/completions", body, auth(TIER1_KEY));
      expect(res.status, body).toBe(400);
      expect(errorOf(res.text).code, body).toBe("duplicate_field");
    }
  });

  it("a tier that is no tier is a shape error, not an authorisation", async () => {
    for (const tier of ['"4"', "7", "0", "2.5"]) {
      const body = `{"model":"m1","messages":[{"role":"user","content":"hi"}],"tier":${tier}}`;
      const res = await post("/v1/chat/completions", body, auth(TIER1_KEY));
      expect(res.status, tier).toBe(400);
      expect(errorOf(res.text), tier).toMatchObject({ code: "invalid_request", param: "tier" });
    }
  });
});
