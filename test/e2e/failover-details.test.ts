// The failover details the seeds name, observed at nodes of our own (test/support/
// hostile-node.ts) and at clients we write: how streams end, what a refusal tells the caller,
// what the node is told, and what intake counts.
import { createHash } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { createClient } from "@zml/client";
import { pollUntil } from "@zml/harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { API_KEY, authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const token = (t: string) =>
  `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${t}"},"finish_reason":null}]}\n\n`;
const FINISH =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n';
const USAGE =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n';
/** Every token, the finish and the usage, then a clean close: no `[DONE]`. */
const WITHOUT_DONE = token("Hel") + token("lo") + FINISH + USAGE;
const WITH_DONE = WITHOUT_DONE + "data: [DONE]\n\n";
const PARTIAL =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"par';

const METERED_KEY = "e2e-metered-key-0123456789";
let stack: Stack;
const nodes = new Map<string, HostileNode>();
/** Headers of the last inference request the `echo` node received. */
let echoed: IncomingHttpHeaders = {};
/** Releases the request the `busy` node holds. */
let releaseBusy: () => void = () => undefined;

const sse = (body: string) =>
  startHostileNode((_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(body);
  });

beforeAll(async () => {
  nodes.set("no-done", await sse(WITHOUT_DONE));
  nodes.set("with-done", await sse(WITH_DONE));
  nodes.set(
    "mid-cut",
    await startHostileNode((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(token("Hel"));
      // Half an event, then the connection breaks.
      res.write(PARTIAL, () => res.socket?.destroy());
    }),
  );
  nodes.set(
    "limited",
    await startHostileNode((_req, res) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "7" });
      res.end('{"error":{"message":"slow down","type":"rate_limit_error","code":null}}');
    }),
  );
  nodes.set(
    "busy",
    await startHostileNode((_req, res) => {
      releaseBusy = () => res.writeHead(200, { "content-type": "application/json" }).end("{}");
    }),
  );
  nodes.set(
    "echo",
    await startHostileNode((req, res) => {
      echoed = req.headers;
      res
        .writeHead(200, { "content-type": "application/json" })
        .end('{"object":"chat.completion"}');
    }),
  );
  // A node that is down: its address answers nothing, so it is never Active.
  const down = await startHostileNode(() => undefined);
  await down.close();
  stack = await startStack({
    nodes: [],
    fleet: { models: [...nodes.keys(), "down", "unserved"].map((id) => ({ id })) },
  });
  await stack.apply({
    ...stack.fleet,
    // One request a minute: the second is refused with 429 before routing.
    accounts: [
      ...stack.fleet.accounts,
      {
        id: "metered",
        api_key_sha256: [createHash("sha256").update(METERED_KEY).digest("hex")],
        allowed_tiers: [1],
        rate_limit: { requests_per_minute: 1, burst: 1 },
      },
    ],
    nodes: [
      ...[...nodes].map(([id, node], i) => hostileNodeSpec(id, node, id, i, id === "busy" ? 1 : 4)),
      hostileNodeSpec("down", down, "down", 99),
    ],
  });
  await waitForStatus(stack, "Active", [...nodes.keys()]);
});

afterAll(async () => {
  await stack?.stop();
  await Promise.all([...nodes.values()].map((n) => n.close()));
});

const chat = (model: string, stream = false, key = API_KEY) =>
  post(JSON.stringify({ model, stream, messages: [{ role: "user", content: "x" }] }), key);

const post = (body: string, key = API_KEY) =>
  fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(key),
    body,
  });

async function metric(line: RegExp): Promise<number> {
  const text = await (await fetch(`${stack.intakeUrl}/metrics`)).text();
  const found = text.split("\n").find((l) => line.test(l));
  return found === undefined ? 0 : Number(found.split(" ").at(-1));
}

/** Intake's "request completed" lines for a model. */
const completedLines = (model: string) =>
  stack
    .logs()
    .split("\n")
    .filter((l) => l.includes('"msg":"request completed"') && l.includes(`"model":"${model}"`));

describe("streams", () => {
  it("a stream that ends cleanly after finish_reason, without [DONE], is complete: every byte, then [DONE]", async () => {
    const res = await chat("no-done", true);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(WITHOUT_DONE + "data: [DONE]\n\n");
  });

  it("ZML's own SDK takes that stream as complete", async () => {
    const zml = createClient({ baseUrl: stack.intakeUrl, apiKey: API_KEY });
    const stream = await zml.infer({
      model: "no-done",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("Hello");
  });

  it("[DONE] passes through when the node sends it, once", async () => {
    const res = await chat("with-done", true);
    expect(await res.text()).toBe(WITH_DONE);
  });

  it("a break mid-event drops the partial event and ends with a clean error event", async () => {
    const res = await chat("mid-cut", true);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.startsWith(token("Hel"))).toBe(true);
    expect(text).not.toContain('"content":"par');
    const events = text.split("\n\n").filter((e) => e !== "");
    // Every event a client parses is whole JSON; the last is the error.
    for (const e of events) {
      expect(() => JSON.parse(e.slice(e.indexOf("data: ") + 6)) as unknown).not.toThrow();
    }
    expect(events.at(-1)).toMatch(/^event: error\ndata: .*"code":"stream_interrupted"/);
  });

  it("the openai SDK reports the break as the gateway's error, not a JSON parse error", async () => {
    const client = new OpenAI({ apiKey: API_KEY, baseURL: `${stack.intakeUrl}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: "mid-cut",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    let text = "";
    const err = await (async (): Promise<unknown> => {
      try {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(text).toBe("Hel");
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String((err as Error).message)).toContain("answer from node broke");
  });

  it("intake logs and counts a broken stream as stream_interrupted, not 200", async () => {
    const before = await metric(
      /^zml_intake_requests_total\{.*status="502".*code="stream_interrupted"/,
    );
    const logged = () => completedLines("mid-cut").length;
    const linesBefore = logged();
    await (await chat("mid-cut", true)).text();
    await pollUntil(() => logged() > linesBefore, { timeoutMs: 5_000, message: "a log line" });
    expect(JSON.parse(completedLines("mid-cut").at(-1)!)).toMatchObject({
      status: 502,
      code: "stream_interrupted",
    });
    const after = await metric(
      /^zml_intake_requests_total\{.*status="502".*code="stream_interrupted"/,
    );
    expect(after).toBe(before + 1);
  });
});

interface ErrorEnvelope {
  error: { code: string; saturation?: Record<string, number> };
}

describe("refusals tell the caller why and when to come back", () => {
  it("a node's 429 reaches the caller with the node's Retry-After", async () => {
    const res = await chat("limited");
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("7");
    expect(await res.text()).toContain("slow down");
  });

  it("the node resting after its 429: 503 saturated, counted as cooling, with Retry-After", async () => {
    const res = await chat("limited");
    const body = (await res.json()) as ErrorEnvelope;
    expect(res.status).toBe(503);
    expect(body.error.code).toBe("saturated");
    expect(body.error.saturation).toEqual({
      considered: 1,
      full: 0,
      cooling: 1,
      inactive: 0,
      unattested: 0,
      failed: 0,
    });
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(nodes.get("limited")!.received()).toBe(1);
  });

  it("every slot taken: 503 saturated, counted as full, with Retry-After", async () => {
    const held = chat("busy");
    await pollUntil(() => nodes.get("busy")!.received() === 1, {
      timeoutMs: 5_000,
      message: "the busy node to hold a request",
    });
    const res = await chat("busy");
    const body = (await res.json()) as ErrorEnvelope;
    releaseBusy();
    expect((await held).status).toBe(200);
    expect(res.status).toBe(503);
    expect(body.error.code).toBe("saturated");
    expect(body.error.saturation).toMatchObject({ considered: 1, full: 1, cooling: 0 });
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(nodes.get("busy")!.received()).toBe(1);
  });

  it("no node active: 503 no_usable_node, counted as inactive, with Retry-After", async () => {
    const res = await chat("down");
    const body = (await res.json()) as ErrorEnvelope;
    expect(res.status).toBe(503);
    expect(body.error.code).toBe("no_usable_node");
    expect(body.error.saturation).toMatchObject({ considered: 1, inactive: 1, full: 0 });
    expect(res.headers.get("retry-after")).toBe("5");
  });

  it("no node serves the model: 503 no_node_available, nothing considered, with Retry-After", async () => {
    const res = await chat("unserved");
    const body = (await res.json()) as ErrorEnvelope;
    expect(res.status).toBe(503);
    expect(body.error.code).toBe("no_node_available");
    expect(body.error.saturation).toMatchObject({ considered: 0 });
    expect(res.headers.get("retry-after")).toBe("5");
  });
});

describe("what the node is told", () => {
  it("the node gets the same x-zml-routing dictionary as the caller, and trace context", async () => {
    const res = await chat("echo");
    expect(res.status).toBe(200);
    const toCaller = res.headers.get(ROUTING_HTTP_HEADER)!;
    const toNode = echoed[ROUTING_HTTP_HEADER];
    expect(typeof toNode).toBe("string");
    expect(toNode).toBe(toCaller);
    expect(parseRoutingHeader(toNode as string)).toMatchObject({
      node: "echo",
      family: "L4",
      tier: 1,
      attempts: 1,
    });
    expect(echoed.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
  });
});

describe("intake counts every request by its final status", () => {
  const counted = (status: number, code: string) =>
    metric(
      new RegExp(
        `^zml_intake_requests_total\\{route="/v1/chat/completions",status="${status}",code="${code}"[,}]`,
      ),
    );

  it.each([
    ["unknown key", 401, "unauthorized", () => chat("echo", false, "not-a-key-0123456789")],
    ["body not JSON", 400, "invalid_json", () => post("{not json")],
    ["unknown model", 404, "unknown_model", () => chat("no-such-model")],
  ])("%s: %i %s, refused before routing", async (_what, status, code, send) => {
    const before = await counted(status, code);
    const res = await send();
    await res.text();
    expect(res.status).toBe(status);
    expect(await counted(status, code)).toBe(before + 1);
  });

  it("an account over its rate limit: 429 rate_limited, and the answered one as 200", async () => {
    const okBefore = await counted(200, "none");
    const limitedBefore = await counted(429, "rate_limited");
    expect((await chat("echo", false, METERED_KEY)).status).toBe(200);
    const res = await chat("echo", false, METERED_KEY);
    expect(res.status).toBe(429);
    expect(await counted(200, "none")).toBe(okBefore + 1);
    expect(await counted(429, "rate_limited")).toBe(limitedBefore + 1);
  });

  // Last: it throttles this address for the rest of the file.
  it("an address throttled after failed authentications: 429 auth_throttled", async () => {
    let res: Response | undefined;
    for (let i = 0; i < 40 && res?.status !== 429; i++) {
      res = await chat("echo", false, "not-a-key-0123456789");
      await res.text();
    }
    expect(res?.status).toBe(429);
    expect(await counted(429, "auth_throttled")).toBeGreaterThanOrEqual(1);
  });
});
