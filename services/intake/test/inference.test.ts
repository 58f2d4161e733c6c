import { request as httpRequest } from "node:http";
import { createReplyWriter, natsConnectionOf } from "@zml/bus";
import type { Msg, Subscription } from "@zml/bus";
import {
  HEADERS,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  ROUTING_HTTP_HEADER,
  SEALED_REQUEST_MEDIA_TYPE,
} from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { API_KEY, LIMITED_KEY, auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";
import { parsePrometheusText } from "@zml/health";

/**
 * Intake against a real bus, with this test standing in for the dispatcher: it records
 * every route request and answers by the requested model.
 */

const ROUTING =
  'decision-id="d-1", node="n1", policy="fast", family="H100", queue-depth=0, tier=1, attempts=1';
let h: Harness;
let dispatcher: Subscription;
let cancels: Subscription;
const seen: Msg[] = [];
const cancelled: string[] = [];

beforeAll(async () => {
  h = await startIntake();
  const enc = new TextEncoder();
  dispatcher = natsConnectionOf(h.bus).subscribe(ROUTE_REQUEST_SUBJECT, {
    callback: (_err, msg) => {
      seen.push(msg);
      const w = createReplyWriter(h.bus, msg.reply!);
      const model = msg.headers?.get(HEADERS.model);
      if (model === "m2") return; // never answers: the client will give up
      if (
        msg.headers?.get(HEADERS.stream) === "1" &&
        msg.headers.get(HEADERS.path) === "/v1/responses"
      ) {
        // Two whole events in one frame, then the node's stream breaks.
        w.head(200, "text/event-stream", ROUTING);
        w.chunk(enc.encode("event: response.created\ndata: {}\n\nevent: a\r\ndata: {}\r\n\r\n"));
        w.error({ code: "stream_interrupted", message: "stream from node broke", param: null });
        return;
      }
      if (msg.headers?.get(HEADERS.stream) === "1") {
        w.head(200, "text/event-stream", ROUTING);
        w.chunk(enc.encode('data: {"x":1}\n\n'));
        w.chunk(enc.encode("data: [DONE]\n\n"));
        w.end();
        return;
      }
      w.full(200, "application/json", ROUTING, msg.data);
    },
  });
  cancels = natsConnectionOf(h.bus).subscribe(ROUTE_CANCEL_SUBJECT, {
    callback: (_err, msg) => void cancelled.push(msg.headers?.get(HEADERS.cancelInbox) ?? ""),
  });
});
afterAll(async () => {
  dispatcher?.unsubscribe();
  cancels?.unsubscribe();
  await h?.close();
});
beforeEach(() => {
  seen.length = 0;
});

async function post(path: string, body: string, headers: Record<string, string> = auth()) {
  const res = await fetch(`${h.url}${path}`, { method: "POST", headers, body });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: "m1", messages: [{ role: "user", content: "hi" }], ...extra });

describe("routing an OpenAI-compatible call", () => {
  it("forwards the bytes unchanged with the routing fields in bus headers", async () => {
    const body = chat({
      temperature: 0.2,
      logit_bias: { "42": 1 },
      models: ["m2", "m1", "org/m3"],
      provider: { sort: "price" },
      accelerator_hint: "H100",
      tier: 2,
      policy: "fast",
    });
    const res = await post("/v1/chat/completions", body);
    expect(res.status).toBe(200);
    expect(res.text).toBe(body);
    expect(res.headers.get(ROUTING_HTTP_HEADER)).toBe(ROUTING);
    expect(res.headers.get("x-request-id")).toBeTruthy();
    const hdr = seen[0]!.headers!;
    expect(new TextDecoder().decode(seen[0]!.data)).toBe(body);
    expect(hdr.get(HEADERS.model)).toBe("m1");
    expect(hdr.get(HEADERS.path)).toBe("/v1/chat/completions");
    expect(hdr.get(HEADERS.fallbackModels)).toBe("m2,org/m3");
    expect(hdr.get(HEADERS.sort)).toBe("price");
    expect(hdr.get(HEADERS.acceleratorHint)).toBe("H100");
    expect(hdr.get(HEADERS.tier)).toBe("2");
    expect(hdr.get(HEADERS.policy)).toBe("fast");
    expect(hdr.get(HEADERS.account)).toBe("main");
    expect(Number(hdr.get(HEADERS.deadline))).toBeGreaterThan(Date.now());
  });

  it("forwards a sealed envelope as bytes, its clear fields as headers, nothing opened", async () => {
    const envelope = JSON.stringify({
      zml_sealed: 2,
      model: "m1",
      session_id: `ses-${"ab".repeat(16)}`,
      tier: 4,
      stream: false,
      max_tokens: 64,
      suite: "x25519-sha256-chacha20poly1305",
      key_id: "cd".repeat(32),
      seq: 7,
      enc: "A".repeat(43),
      ciphertext: "B".repeat(40),
    });
    const res = await post("/v1/chat/completions", envelope, {
      ...auth(),
      "content-type": `${SEALED_REQUEST_MEDIA_TYPE}; charset=utf-8`,
    });
    expect(res.status, res.text).toBe(200);
    expect(new TextDecoder().decode(seen[0]!.data)).toBe(envelope);
    const hdr = seen[0]!.headers!;
    expect(hdr.get(HEADERS.sessionId)).toBe(`ses-${"ab".repeat(16)}`);
    expect(hdr.get(HEADERS.sealedKeyId)).toBe("cd".repeat(32));
    expect(hdr.get(HEADERS.tier)).toBe("4");
    expect(hdr.get(HEADERS.maxTokens)).toBe("64");
    expect(hdr.get(HEADERS.stream)).toBe("0");
  });

  it("refuses a clear body at tier 4 or naming a session, and a bad envelope by its field", async () => {
    for (const [body, param] of [
      [chat({ tier: 4 }), "tier"],
      [chat({ session_id: "sess-1" }), "session_id"],
    ] as const) {
      const res = await post("/v1/chat/completions", body);
      expect(res.status).toBe(400);
      expect(errorOf(res.text)).toMatchObject({ code: "sealed_body_required", param });
    }
    const sealedHeaders = { ...auth(), "content-type": SEALED_REQUEST_MEDIA_TYPE };
    const bad = await post("/v1/chat/completions", chat(), sealedHeaders);
    expect(bad.status).toBe(400);
    expect(errorOf(bad.text).code).toBe("invalid_request");
    // The previous sealed format (version 1, an HPKE setup per request) is refused by name.
    const v1 = JSON.stringify({
      zml_sealed: 1,
      model: "m1",
      session_id: `ses-${"ab".repeat(16)}`,
      stream: false,
      suite: "x25519-sha256-chacha20poly1305",
      key_id: "cd".repeat(32),
      seq: 7,
      enc: "A".repeat(43),
      ciphertext: "B".repeat(40),
    });
    const old = await post("/v1/chat/completions", v1, sealedHeaders);
    expect(old.status).toBe(400);
    expect(errorOf(old.text)).toMatchObject({ code: "invalid_request", param: "zml_sealed" });
    expect(JSON.parse(old.text).error.message).toContain("version 2 of the sealed format");
    expect(seen).toHaveLength(0);
  });

  it("sends no optional headers when the request has no such fields", async () => {
    await post("/v1/completions", JSON.stringify({ model: "m1", prompt: "x" }));
    const hdr = seen[0]!.headers!;
    expect(hdr.get(HEADERS.path)).toBe("/v1/completions");
    expect(hdr.get(HEADERS.policy)).toBe("balanced");
    for (const name of [
      HEADERS.fallbackModels,
      HEADERS.sort,
      HEADERS.sessionId,
      HEADERS.acceleratorHint,
    ]) {
      expect(hdr.has(name)).toBe(false);
    }
  });

  it("relays a stream frame by frame with the routing header", async () => {
    const res = await post("/v1/chat/completions", chat({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(res.headers.get(ROUTING_HTTP_HEADER)).toBe(ROUTING);
    expect(res.text).toBe('data: {"x":1}\n\ndata: [DONE]\n\n');
  });
});

describe("the Responses and Embeddings APIs", () => {
  it("route like chat, the path telling the dispatcher which API is called", async () => {
    const responses = JSON.stringify({ model: "m1", input: "hi", tier: 2 });
    const res = await post("/v1/responses", responses);
    expect(res.status).toBe(200);
    expect(res.text).toBe(responses);
    expect(seen[0]!.headers!.get(HEADERS.path)).toBe("/v1/responses");
    expect(seen[0]!.headers!.get(HEADERS.tier)).toBe("2");
    const embeddings = JSON.stringify({ model: "m1", input: ["a", "b"], stream: true });
    const emb = await post("/v1/embeddings", embeddings);
    expect(emb.status).toBe(200);
    expect(emb.text).toBe(embeddings);
    expect(seen[1]!.headers!.get(HEADERS.path)).toBe("/v1/embeddings");
    // Embeddings never stream, whatever the body says.
    expect(seen[1]!.headers!.get(HEADERS.stream)).toBe("0");
  });

  it("reject a body without input, naming the field", async () => {
    for (const path of ["/v1/responses", "/v1/embeddings"]) {
      const res = await post(path, JSON.stringify({ model: "m1" }));
      expect(res.status, path).toBe(400);
      expect(errorOf(res.text)).toMatchObject({ code: "invalid_request", param: "input" });
    }
    expect(seen).toHaveLength(0);
  });

  it("end a broken Responses stream with the API's typed error event, numbered", async () => {
    const res = await post(
      "/v1/responses",
      JSON.stringify({ model: "m1", input: "x", stream: true }),
    );
    expect(res.status).toBe(200);
    const events = res.text.split(/\r?\n\r?\n/).filter(Boolean);
    expect(events).toHaveLength(3);
    const last = events[2]!.split("\n");
    expect(last[0]).toBe("event: error");
    expect(JSON.parse(last[1]!.slice("data: ".length))).toMatchObject({
      type: "error",
      sequence_number: 2,
      error: { code: "stream_interrupted", type: "api_error" },
    });
  });
});

describe("one model", () => {
  it("is retrieved by id, a slash in the id encoded or not", async () => {
    for (const path of ["m1", "org%2Fm3", "org/m3"]) {
      const res = await fetch(`${h.url}/v1/models/${path}`, { headers: auth() });
      expect(res.status, path).toBe(200);
      expect(await res.json()).toEqual({
        id: decodeURIComponent(path),
        object: "model",
        created: 0,
        owned_by: "zml",
      });
    }
  });

  it("is 404 unknown_model when not configured, 401 without a key", async () => {
    const missing = await fetch(`${h.url}/v1/models/nope`, { headers: auth() });
    expect(missing.status).toBe(404);
    expect(errorOf(await missing.text())).toMatchObject({ code: "unknown_model", param: "model" });
    expect((await fetch(`${h.url}/v1/models/m1`)).status).toBe(401);
  });
});

describe("the native call", () => {
  it("routes like the OpenAI call and gives the node a chat completion body", async () => {
    const res = await post(
      "/v1/infer",
      JSON.stringify({
        model: "m1",
        messages: [{ role: "user", content: "hi" }],
        fallback_models: ["m2"],
        sort: "quality",
        max_tokens: 7,
        tier: 2,
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get(ROUTING_HTTP_HEADER)).toBe(ROUTING);
    const hdr = seen[0]!.headers!;
    expect(hdr.get(HEADERS.path)).toBe("/v1/chat/completions");
    expect(hdr.get(HEADERS.fallbackModels)).toBe("m2");
    expect(hdr.get(HEADERS.sort)).toBe("quality");
    expect(hdr.get(HEADERS.tier)).toBe("2");
    expect(JSON.parse(new TextDecoder().decode(seen[0]!.data))).toEqual({
      model: "m1",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 7,
    });
  });

  it("names a misspelt field", async () => {
    const res = await post(
      "/v1/infer",
      JSON.stringify({ model: "m1", messages: [{ role: "user" }], fallbacks: ["m2"] }),
    );
    expect(res.status).toBe(400);
    expect(errorOf(res.text)).toMatchObject({ code: "invalid_request", param: "fallbacks" });
  });
});

describe("a client that goes away", () => {
  it.each([false, true])("cancels the routed request on the bus (stream=%s)", async (stream) => {
    const before = cancelled.length;
    const body = chat({ model: "m2", stream });
    const req = httpRequest(`${h.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...auth(), "content-length": Buffer.byteLength(body) },
    });
    req.on("error", () => undefined);
    req.end(body);
    await pollUntil(() => seen.length > 0, { timeoutMs: 10_000, message: "request on the bus" });
    req.destroy();
    await pollUntil(() => cancelled.length > before, {
      timeoutMs: 10_000,
      message: "cancel published",
    });
    expect(cancelled.at(-1)).toBe(seen[0]!.reply);
  });
});

describe("accounts", () => {
  it("limits an account's rate with 429, Retry-After and the OpenAI shape", async () => {
    const limited = auth(LIMITED_KEY);
    expect((await post("/v1/chat/completions", chat(), limited)).status).toBe(200);
    expect((await post("/v1/chat/completions", chat(), limited)).status).toBe(200);
    const res = await post("/v1/chat/completions", chat(), limited);
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(errorOf(res.text)).toEqual({
      code: "rate_limited",
      param: null,
      type: "rate_limit_error",
    });
    // Other accounts are unaffected.
    expect((await post("/v1/chat/completions", chat())).status).toBe(200);
  });

  it("lists the configured models to a known key only", async () => {
    const ok = await fetch(`${h.url}/v1/models`, { headers: auth(API_KEY) });
    expect(ok.status).toBe(200);
    const list = (await ok.json()) as { data: Array<{ id: string }> };
    expect(list.data.map((m) => m.id).sort()).toEqual(["m1", "m2", "org/m3"]);
    const bad = await fetch(`${h.url}/v1/models`, { headers: auth("nope") });
    expect(bad.status).toBe(401);
    expect(errorOf(await bad.text())).toEqual({
      code: "unauthorized",
      param: "authorization",
      type: "authentication_error",
    });
  });
});

describe("zml_intake_requests_total", () => {
  const counted = async (status: number, code: string) => {
    const text = await (await fetch(`${h.url}/metrics`)).text();
    const sample = parsePrometheusText(text)
      .series.get("zml_intake_requests_total")
      ?.find(
        (s) =>
          s.labels.route === "/v1/chat/completions" &&
          s.labels.status === String(status) &&
          s.labels.code === code,
      );
    return sample?.value ?? 0;
  };

  it("counts requests refused before routing by status and code, and routed ones", async () => {
    const cases: Array<[number, string, () => Promise<unknown>]> = [
      [
        401,
        "unauthorized",
        () => post("/v1/chat/completions", chat(), auth("wrong-key-0123456789")),
      ],
      [400, "invalid_json", () => post("/v1/chat/completions", "{nope")],
      [404, "unknown_model", () => post("/v1/chat/completions", chat({ model: "nope" }))],
      [200, "none", () => post("/v1/chat/completions", chat())],
    ];
    for (const [status, code, send] of cases) {
      const before = await counted(status, code);
      await send();
      expect(await counted(status, code), `${status} ${code}`).toBe(before + 1);
    }
  });
});
