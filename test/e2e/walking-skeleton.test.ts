import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import OpenAI from "openai";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  API_KEY,
  MODEL,
  authHeaders,
  chatBody,
  startActiveStack,
  waitForStatus,
} from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { readChatStream } from "../support/chat-stream.ts";

let stack: Stack;

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      { nodeId: "mi300x-a", family: "MI300X" },
      { nodeId: "tgi-a", family: "A100", flavour: "tgi" },
    ],
  });
});

afterAll(async () => {
  await stack?.stop();
});

async function chat(body: string, headers = authHeaders()) {
  const res = await request(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers,
    body,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

function payloadsSeen(): number {
  return [...stack.sims.values()].reduce((n, s) => n + s.stats().payloads_received, 0);
}

describe("a request routed end to end", () => {
  it("returns the node's chat completion with the routing header", async () => {
    const res = await chat(chatBody());
    expect(res.status).toBe(200);
    const completion = JSON.parse(res.text);
    expect(completion.object).toBe("chat.completion");
    expect(completion.choices[0].message.role).toBe("assistant");
    const routing = parseRoutingHeader(String(res.headers[ROUTING_HTTP_HEADER]));
    expect(stack.sims.has(routing.node)).toBe(true);
    expect(routing).toMatchObject({ policy: "balanced", tier: 1, attempts: 1 });
    expect(routing.decisionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(["H100", "MI300X", "A100"]).toContain(routing.family);
  });

  it("forwards the client's bytes to the node unchanged", async () => {
    const body = chatBody({ temperature: 0.25, some_vendor_param: { nested: [1, 2] } });
    const res = await chat(body);
    expect(res.status).toBe(200);
    const node = parseRoutingHeader(String(res.headers[ROUTING_HTTP_HEADER])).node;
    const { createHash } = await import("node:crypto");
    expect(stack.sims.get(node)!.stats().last_request?.body_sha256).toBe(
      createHash("sha256").update(body).digest("hex"),
    );
  });

  it("streams SSE chunks ending in [DONE]", async () => {
    const res = await chat(chatBody({ stream: true }));
    expect(res.status).toBe(200);
    expect(String(res.headers["content-type"])).toMatch(/^text\/event-stream/);
    expect(res.headers[ROUTING_HTTP_HEADER]).toBeDefined();
    const events = res.text.split("\n\n").filter(Boolean);
    expect(events.length).toBeGreaterThan(2);
    expect(events.at(-1)).toBe("data: [DONE]");
    const first = JSON.parse(events[0]!.replace(/^data: /, ""));
    expect(first.object).toBe("chat.completion.chunk");
  });
});

describe("the official openai SDK against the gateway", () => {
  const client = () =>
    new OpenAI({ apiKey: API_KEY, baseURL: `${stack.intakeUrl}/v1`, maxRetries: 0 });

  it("creates a chat completion and exposes the routing header", async () => {
    const { data, response } = await client()
      .chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] })
      .withResponse();
    expect(data.choices[0]?.message.content).toBeTruthy();
    expect(parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!).attempts).toBe(1);
  });

  it("streams a chat completion", async () => {
    const stream = await client().chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    const { text, chunks } = await readChatStream(stream);
    expect(chunks).toBeGreaterThan(1);
    expect(text.length).toBeGreaterThan(0);
  });

  it("raises the SDK's authentication error for a wrong key", async () => {
    const bad = new OpenAI({ apiKey: "wrong", baseURL: `${stack.intakeUrl}/v1`, maxRetries: 0 });
    await expect(
      bad.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
    ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

describe("bad input gets a clear error and reaches no node", () => {
  const cases: Array<
    [string, string, Record<string, string> | undefined, number, string, string | null]
  > = [
    ["malformed JSON", "{not json", undefined, 400, "invalid_json", "body"],
    [
      "missing model",
      JSON.stringify({ messages: [{ role: "user", content: "x" }] }),
      undefined,
      400,
      "invalid_request",
      "model",
    ],
    [
      "missing messages",
      JSON.stringify({ model: MODEL }),
      undefined,
      400,
      "invalid_request",
      "messages",
    ],
    [
      "wrong type",
      JSON.stringify({ model: MODEL, messages: "hi" }),
      undefined,
      400,
      "invalid_request",
      "messages",
    ],
    ["bad tier", chatBody({ tier: 9 }), undefined, 400, "invalid_request", "tier"],
    [
      "unknown model",
      chatBody({ model: "no-such-model" }),
      undefined,
      404,
      "unknown_model",
      "model",
    ],
    [
      "unknown policy",
      chatBody({ policy: "no-such-policy" }),
      undefined,
      400,
      "unknown_policy",
      "policy",
    ],
    ["tier not allowed", chatBody({ tier: 3 }), undefined, 403, "tier_not_allowed", "tier"],
    [
      "missing API key",
      chatBody(),
      { "content-type": "application/json" },
      401,
      "unauthorized",
      "authorization",
    ],
    ["wrong API key", chatBody(), authHeaders("not-the-key"), 401, "unauthorized", "authorization"],
    [
      "malformed Authorization",
      chatBody(),
      { authorization: "Basic abc", "content-type": "application/json" },
      401,
      "unauthorized",
      "authorization",
    ],
  ];

  it.each(cases)("%s", async (_name, body, headers, status, code, param) => {
    const before = payloadsSeen();
    const res = await chat(body, headers ?? authHeaders());
    expect(res.status).toBe(status);
    const error = JSON.parse(res.text).error;
    expect(error).toMatchObject({ code, param });
    expect(typeof error.message).toBe("string");
    expect(typeof error.type).toBe("string");
    expect(payloadsSeen()).toBe(before);
  });

  it("rejects an oversize body with 413", async () => {
    const huge = chatBody({ messages: [{ role: "user", content: "x".repeat(5 * 1024 * 1024) }] });
    const res = await chat(huge);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text).error).toMatchObject({ code: "payload_too_large", param: "body" });
  });

  it("stays up after all of it", async () => {
    expect((await chat(chatBody())).status).toBe(200);
  });
});

describe("node health drives routing", () => {
  it("stops sending traffic to a node whose /health fails, after the next poll", async () => {
    const sick = stack.sims.get("h100-a")!;
    sick.setFault({ kind: "health_fail" });
    try {
      await waitForStatus(stack, "Degraded", ["h100-a"]).catch(() =>
        waitForStatus(stack, "Isolated", ["h100-a"]),
      );
      const before = sick.stats().payloads_received;
      for (let i = 0; i < 10; i++) {
        const res = await chat(chatBody());
        expect(res.status).toBe(200);
        expect(parseRoutingHeader(String(res.headers[ROUTING_HTTP_HEADER])).node).not.toBe(
          "h100-a",
        );
      }
      expect(sick.stats().payloads_received).toBe(before);
    } finally {
      sick.setFault(null);
    }
  });
});

describe("nats-server restart while idle", () => {
  it("leaves every service serving again without restarting any", async () => {
    const pids = [...stack.services.values()].map((s) => s.pid);
    await stack.nats.restart();
    await pollUntil(
      async () => {
        const res = await chat(chatBody());
        return res.status === 200;
      },
      { timeoutMs: 30_000, intervalMs: 200, message: "serving after nats restart" },
    );
    expect([...stack.services.values()].map((s) => s.pid)).toEqual(pids);
    for (const s of stack.services.values()) {
      expect(await Promise.race([s.exited.then(() => "exited"), Promise.resolve("running")])).toBe(
        "running",
      );
    }
  });
});
