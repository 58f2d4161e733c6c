import { connect } from "node:net";
import { Readable } from "node:stream";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL, adminHeaders, authHeaders, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/**
 * Acceptance: bad input of every kind gets the right status, machine-readable code and
 * offending field, reaches no node, and leaves every service up.
 */

let stack: Stack;
beforeAll(async () => {
  stack = await startActiveStack({ nodes: [{ nodeId: "h100-a", family: "H100" }] });
});
afterAll(async () => {
  await stack?.stop();
});

const payloads = () =>
  [...stack.sims.values()].reduce((n, s) => n + s.stats().payloads_received, 0);

async function call(
  method: "GET" | "POST" | "PUT",
  path: string,
  body?: string | Buffer,
  headers: Record<string, string> = authHeaders(),
) {
  const res = await request(`${stack.intakeUrl}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.body.text();
  let error: { code?: string; param?: string | null; message?: string; type?: string } = {};
  try {
    error = (JSON.parse(text) as { error?: typeof error }).error ?? {};
  } catch {
    // not JSON: the assertions below say so
  }
  return { status: res.statusCode, headers: res.headers, error };
}

const messages = [{ role: "user", content: "x" }];
const infer = (extra: Record<string, unknown>) =>
  JSON.stringify({ model: MODEL, messages, ...extra });

type Case = [
  name: string,
  path: string,
  body: string | Buffer,
  status: number,
  code: string,
  param: string | null,
];

const CASES: Case[] = [
  // malformed JSON and bodies of the wrong shape
  ["malformed JSON (chat)", "/v1/chat/completions", '{"model": "x",', 400, "invalid_json", "body"],
  ["malformed JSON (completions)", "/v1/completions", "{'model': 1}", 400, "invalid_json", "body"],
  ["malformed JSON (infer)", "/v1/infer", "\u0000", 400, "invalid_json", "body"],
  ["JSON array", "/v1/chat/completions", "[]", 400, "invalid_request", "body"],
  ["JSON string", "/v1/infer", '"hi"', 400, "invalid_request", "body"],
  ["empty body", "/v1/chat/completions", "", 400, "invalid_request", "body"],
  // bytes and keys that parsers disagree on
  [
    "invalid UTF-8",
    "/v1/chat/completions",
    Buffer.concat([
      Buffer.from(`{"model":"${MODEL}","messages":[{"role":"user","content":"`),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}]}'),
    ]),
    400,
    "invalid_json",
    "body",
  ],
  [
    "duplicate model",
    "/v1/chat/completions",
    `{"model":"${MODEL}","messages":[],"model":"other"}`,
    400,
    "duplicate_field",
    "model",
  ],
  [
    "duplicate escaped tier",
    "/v1/chat/completions",
    `{"model":"${MODEL}","messages":[],"tier":1,"ti\\u0065r":3}`,
    400,
    "duplicate_field",
    "tier",
  ],
  [
    "duplicate provider.sort",
    "/v1/chat/completions",
    `{"model":"${MODEL}","messages":[],"provider":{"sort":"price","sort":"quality"}}`,
    400,
    "duplicate_field",
    "provider.sort",
  ],
  [
    "duplicate model (native)",
    "/v1/infer",
    `{"model":"${MODEL}","model":"${MODEL}","messages":[]}`,
    400,
    "duplicate_field",
    "model",
  ],
  // wrong types
  [
    "model is a number",
    "/v1/chat/completions",
    JSON.stringify({ model: 7, messages }),
    400,
    "invalid_request",
    "model",
  ],
  [
    "messages is a string",
    "/v1/chat/completions",
    JSON.stringify({ model: MODEL, messages: "hi" }),
    400,
    "invalid_request",
    "messages",
  ],
  [
    "message without role",
    "/v1/chat/completions",
    JSON.stringify({ model: MODEL, messages: [{ content: "x" }] }),
    400,
    "invalid_request",
    "messages.0.role",
  ],
  [
    "stream is a string",
    "/v1/chat/completions",
    chatBody({ stream: "yes" }),
    400,
    "invalid_request",
    "stream",
  ],
  [
    "tier is a string",
    "/v1/chat/completions",
    chatBody({ tier: "1" }),
    400,
    "invalid_request",
    "tier",
  ],
  [
    "tier out of range",
    "/v1/chat/completions",
    chatBody({ tier: 5 }),
    400,
    "invalid_request",
    "tier",
  ],
  [
    "models is not a list",
    "/v1/chat/completions",
    chatBody({ models: MODEL }),
    400,
    "invalid_request",
    "models",
  ],
  [
    "unknown provider.sort",
    "/v1/chat/completions",
    chatBody({ provider: { sort: "vibes" } }),
    400,
    "invalid_request",
    "provider.sort",
  ],
  [
    "prompt is an object",
    "/v1/completions",
    JSON.stringify({ model: MODEL, prompt: { a: 1 } }),
    400,
    "invalid_request",
    "prompt",
  ],
  [
    "missing prompt",
    "/v1/completions",
    JSON.stringify({ model: MODEL }),
    400,
    "invalid_request",
    "prompt",
  ],
  [
    "responses: no input",
    "/v1/responses",
    JSON.stringify({ model: MODEL }),
    400,
    "invalid_request",
    "input",
  ],
  [
    "embeddings: input is an object",
    "/v1/embeddings",
    JSON.stringify({ model: MODEL, input: { text: "x" } }),
    400,
    "invalid_request",
    "input",
  ],
  [
    "native: negative max_tokens",
    "/v1/infer",
    infer({ max_tokens: -1 }),
    400,
    "invalid_request",
    "max_tokens",
  ],
  [
    "native: unknown field",
    "/v1/infer",
    infer({ tempreture: 1 }),
    400,
    "invalid_request",
    "tempreture",
  ],
  [
    "native: fallback of wrong type",
    "/v1/infer",
    infer({ fallback_models: [1] }),
    400,
    "invalid_request",
    "fallback_models.0",
  ],
  // unknown names and permissions
  [
    "unknown model",
    "/v1/chat/completions",
    chatBody({ model: "no-such-model" }),
    404,
    "unknown_model",
    "model",
  ],
  [
    "unknown fallback model",
    "/v1/chat/completions",
    chatBody({ models: [MODEL, "nope"] }),
    404,
    "unknown_model",
    "models.1",
  ],
  ["unknown model (native)", "/v1/infer", infer({ model: "nope" }), 404, "unknown_model", "model"],
  [
    "unknown policy",
    "/v1/chat/completions",
    chatBody({ policy: "no-such-policy" }),
    400,
    "unknown_policy",
    "policy",
  ],
  [
    "unknown policy (native)",
    "/v1/infer",
    infer({ policy: "nope" }),
    400,
    "unknown_policy",
    "policy",
  ],
  [
    "tier not allowed",
    "/v1/chat/completions",
    chatBody({ tier: 3 }),
    403,
    "tier_not_allowed",
    "tier",
  ],
  ["tier not allowed (native)", "/v1/infer", infer({ tier: 3 }), 403, "tier_not_allowed", "tier"],
  // header injection through fields that travel in bus headers
  [
    "CRLF in accelerator_hint",
    "/v1/chat/completions",
    chatBody({ accelerator_hint: "H100\r\nZml-Tier: 4" }),
    400,
    "invalid_request",
    "accelerator_hint",
  ],
  [
    // A session is tier 4, which this account may not use: refused before its id is read
    // (services/intake/test/tier-order.test.ts checks the id's own 400 for an account of tier 4).
    "CRLF in session_id",
    "/v1/chat/completions",
    chatBody({ session_id: "s\r\nZml-Account: root" }),
    403,
    "tier_not_allowed",
    "tier",
  ],
  [
    "CRLF in policy",
    "/v1/chat/completions",
    chatBody({ policy: "interactive\r\nZml-Tier: 4" }),
    400,
    "unknown_policy",
    "policy",
  ],
  [
    "CRLF in model",
    "/v1/chat/completions",
    chatBody({ model: `${MODEL}\r\nZml-Tier: 4` }),
    404,
    "unknown_model",
    "model",
  ],
  [
    "comma in fallback model",
    "/v1/chat/completions",
    chatBody({ models: [`${MODEL},other`] }),
    404,
    "unknown_model",
    "models.0",
  ],
];

describe("inference calls", () => {
  it.each(CASES)("%s → %i %s (%s)", async (_name, path, body, status, code, param) => {
    const before = payloads();
    const res = await call("POST", path, body);
    expect(res.status).toBe(status);
    expect(res.error).toMatchObject({ code, param });
    expect(typeof res.error.message).toBe("string");
    expect(typeof res.error.type).toBe("string");
    expect(payloads()).toBe(before);
  });

  it("answers 401 to missing, wrong and malformed credentials", async () => {
    for (const headers of [
      { "content-type": "application/json" },
      authHeaders("not-the-key"),
      { authorization: "Basic YTpi", "content-type": "application/json" },
    ]) {
      const res = await call("POST", "/v1/chat/completions", chatBody(), headers);
      expect(res.status).toBe(401);
      expect(res.error).toMatchObject({
        code: "unauthorized",
        param: "authorization",
        type: "authentication_error",
      });
    }
  });

  it("answers 413 with a clear error to huge bodies, announced or not", async () => {
    const huge = chatBody({ messages: [{ role: "user", content: "x".repeat(5 * 1024 * 1024) }] });
    const declared = await call("POST", "/v1/chat/completions", huge);
    expect(declared.status).toBe(413);
    expect(declared.error).toMatchObject({ code: "payload_too_large", param: "body" });
    expect(declared.error.message).toMatch(/larger than the limit/);
    const chunked = await request(`${stack.intakeUrl}/v1/infer`, {
      method: "POST",
      headers: authHeaders(),
      // A stream has no known length: the body goes chunked, with no Content-Length to check.
      body: Readable.from(Array.from({ length: 6 }, () => Buffer.alloc(1024 * 1024, 0x20))),
    });
    expect(chunked.statusCode).toBe(413);
    expect(JSON.parse(await chunked.body.text()).error.code).toBe("payload_too_large");
  });

  it("answers 404 naming the path for unknown routes and methods", async () => {
    for (const [method, path] of [
      ["GET", "/v1/chat/completions"],
      ["POST", "/v1/audio/speech"],
      ["GET", "/v2/models"],
    ] as const) {
      const res = await call(method, path, method === "POST" ? chatBody() : undefined);
      expect(res.status).toBe(404);
      expect(res.error).toMatchObject({ code: "not_found", param: "path" });
    }
  });
});

describe("header injection at the HTTP layer", () => {
  /** Raw bytes on a socket: undici refuses to send these headers at all. */
  function raw(text: string): Promise<string> {
    const { hostname, port } = new URL(stack.intakeUrl);
    return new Promise((resolve, reject) => {
      const s = connect(Number(port), hostname, () => s.end(text));
      let out = "";
      s.setEncoding("latin1");
      s.on("data", (c: string) => (out += c));
      s.on("close", () => resolve(out));
      s.on("error", reject);
    });
  }

  it("rejects bare CR, obs-fold and NUL in headers with 400, touching no node", async () => {
    const before = payloads();
    const body = chatBody();
    const start = `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
    for (const header of [
      `authorization: Bearer x\rzml-tier: 4\r\n`,
      `authorization: Bearer x\r\n zml-tier: 4\r\n`,
      `x-request-id: a\u0000b\r\n`,
    ]) {
      expect(await raw(`${start}${header}\r\n${body}`)).toMatch(/^HTTP\/1\.1 400 /);
    }
    expect(payloads()).toBe(before);
  });

  it("never echoes an unsafe request id", async () => {
    const res = await call("POST", "/v1/chat/completions", chatBody({ tier: 3 }), {
      ...authHeaders(),
      "x-request-id": "abc<script>",
    });
    expect(res.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/);
    const kept = await call("POST", "/v1/chat/completions", chatBody({ tier: 3 }), {
      ...authHeaders(),
      "x-request-id": "client-req-1",
    });
    expect(kept.headers["x-request-id"]).toBe("client-req-1");
  });
});

describe("invalid admin documents", () => {
  const node = {
    endpoint: "http://10.0.0.9:8000",
    framework: "vllm",
    accelerator_family: "H100",
    tier: 1,
    models: [MODEL],
  };
  const ADMIN: Array<[string, unknown, number, string, string]> = [
    ["nodes/n-1", { ...node, endpoint: "not a url" }, 400, "invalid_request", "endpoint"],
    ["nodes/n-1", { ...node, framework: "pytorch" }, 400, "invalid_request", "framework"],
    ["nodes/n-1", { ...node, id: "n-2" }, 400, "invalid_request", "id"],
    ["nodes/n%0D%0Ax", node, 400, "invalid_request", "key"],
    [
      "policies/p-1",
      {
        accelerator_preference: [{ family: "H100", priority: "1" }],
        latency_target_ms: 1,
        cost_priority: "cost",
      },
      400,
      "invalid_request",
      "accelerator_preference.0.priority",
    ],
    [
      "policies/p-1",
      {
        accelerator_preference: [{ family: "H100", priority: 1 }],
        latency_target_ms: -5,
        cost_priority: "cost",
      },
      400,
      "invalid_request",
      "latency_target_ms",
    ],
    ["models/m-1", { default_policy: "ghost" }, 400, "unknown_policy", "default_policy"],
    ["accounts/a-1", { allowed_tiers: [] }, 400, "invalid_request", "allowed_tiers"],
    ["accounts/a-1", { api_key: "plaintext-key" }, 400, "invalid_request", "api_key"],
    [
      "costs/c-1",
      { kind: "cloud_spot", cloud_account: "aws", family: "H100", nodes: [], usd_per_gpu_hour: 1 },
      400,
      "invalid_request",
      "nodes",
    ],
    [
      "quality-scores/q-1",
      { model: MODEL, family: "H100", score: "high", source: "x" },
      400,
      "invalid_request",
      "score",
    ],
    ["measurements/me-1", { model: MODEL, tier: 3, mrtd: "xyz" }, 400, "invalid_request", "mrtd"],
    ["revocations/r-1", { reason: "no match fields" }, 400, "invalid_request", "node_id"],
    ["gadgets/g-1", {}, 404, "not_found", "kind"],
  ];

  it.each(ADMIN)("PUT /admin/v1/%s → %i %s (%s)", async (path, doc, status, code, param) => {
    const res = await call("PUT", `/admin/v1/${path}`, JSON.stringify(doc), adminHeaders());
    expect(res.status).toBe(status);
    expect(res.error).toMatchObject({ code, param });
  });

  it("rejects malformed JSON and wrong credentials", async () => {
    const bad = await call("PUT", "/admin/v1/policies/p-1", "{", adminHeaders());
    expect([bad.status, bad.error.code, bad.error.param]).toEqual([400, "invalid_json", "body"]);
    for (const headers of [
      authHeaders(),
      adminHeaders("wrong-admin-token-000000"),
      { "content-type": "application/json" },
    ]) {
      const res = await call("GET", "/admin/v1/nodes", undefined, headers);
      expect([res.status, res.error.code]).toEqual([401, "unauthorized"]);
    }
  });
});

describe("after all of it", () => {
  it("every service is still up and a good request is served", async () => {
    for (const [name, proc] of stack.services) {
      const state = await Promise.race([
        proc.exited.then(() => "exited"),
        Promise.resolve("running"),
      ]);
      expect(state, name).toBe("running");
    }
    expect((await call("GET", "/readyz", undefined, {})).status).toBe(200);
    const ok = await request(`${stack.intakeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(),
      body: chatBody(),
    });
    expect(ok.statusCode).toBe(200);
    await ok.body.text();
  });
});
