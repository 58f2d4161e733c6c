import { createClient, ZmlApiError } from "@zml/client";
import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  API_KEY,
  MODEL,
  authHeaders,
  chainPolicy,
  chatBody,
  startActiveStack,
} from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { readChatStream } from "../support/chat-stream.ts";

/**
 * The TypeScript SDK (`@zml/client`) against a whole gateway. A recording fetch sees
 * the raw `x-zml-routing` header of every answer, so `response.routing` can be compared
 * with what the gateway actually sent.
 */

const UNSERVED = "unserved-model";
let stack: Stack;
const headersSeen: string[] = [];
/** The global fetch, noting the raw routing header of every answer on the way. */
const recording = async (url: string, init: RequestInit): Promise<Response> => {
  const res = await fetch(url, init);
  const routing = res.headers.get(ROUTING_HTTP_HEADER);
  if (routing !== null) headersSeen.push(routing);
  return res;
};

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      { nodeId: "mi300x-a", family: "MI300X" },
    ],
    fleet: {
      models: [{ id: MODEL }, { id: UNSERVED }],
      policies: [chainPolicy("mi300x-first", ["MI300X", "H100"])],
    },
  });
  // The dispatchers' view of node state trails the KV snapshot by a moment.
  await pollUntil(
    async () => {
      const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: authHeaders(),
        body: chatBody({ policy: "mi300x-first" }),
      });
      await res.arrayBuffer();
      return res.headers.get(ROUTING_HTTP_HEADER)?.includes('family="MI300X"') === true;
    },
    { timeoutMs: 15_000, message: "MI300X routable" },
  );
});
afterAll(async () => {
  await stack?.stop();
});

const zml = () => createClient({ baseUrl: stack.intakeUrl, apiKey: API_KEY, fetch: recording });
const messages = [{ role: "user", content: "Say hello" }];

describe("client.infer()", () => {
  it("returns the completion with response.routing equal to the x-zml-routing header", async () => {
    const before = headersSeen.length;
    const res = await zml().infer({
      model: MODEL,
      messages,
      policy: "mi300x-first",
      max_tokens: 8,
    });
    expect(res.choices[0]?.message.content).toBeTruthy();
    expect(headersSeen.length).toBe(before + 1);
    expect(res.routing).toEqual(parseRoutingHeader(headersSeen.at(-1)!));
    expect(res.routing).toMatchObject({
      node: "mi300x-a",
      family: "MI300X",
      policy: "mi300x-first",
      tier: 1,
      attempts: 1,
    });
    expect(res.requestId).toBeTruthy();
  });

  it("streams as an async iterator, routing known before the first chunk", async () => {
    const before = headersSeen.length;
    const stream = await zml().infer({
      model: MODEL,
      messages,
      stream: true,
      accelerator_hint: "H100",
    });
    expect(stream.routing).toEqual(parseRoutingHeader(headersSeen[before]!));
    const { text, chunks } = await readChatStream(stream);
    expect(chunks).toBeGreaterThan(1);
    expect(text.length).toBeGreaterThan(0);
  });

  it("falls back through fallback_models", async () => {
    const res = await zml().infer({ model: UNSERVED, messages, fallback_models: [MODEL] });
    expect(res.model).toBe(MODEL);
    expect(res.routing).toEqual(parseRoutingHeader(headersSeen.at(-1)!));
  });

  it("chat() speaks the OpenAI-compatible path with ZML fields alongside", async () => {
    const res = await zml().chat({
      model: MODEL,
      messages,
      policy: "mi300x-first",
      temperature: 0,
    });
    expect(res.object).toBe("chat.completion");
    expect(res.routing.family).toBe("MI300X");
  });

  it("lists the models", async () => {
    expect((await zml().models()).map((m) => m.id).sort()).toEqual([MODEL, UNSERVED].sort());
  });
});

describe("typed errors carry the API's codes", () => {
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => {
        throw new Error("did not fail");
      },
      (e: unknown) => e as ZmlApiError,
    );

  it.each([
    ["tier not allowed", { model: MODEL, messages, tier: 3 }, 403, "tier_not_allowed", "tier"],
    ["unknown model", { model: "no-such", messages }, 404, "unknown_model", "model"],
    [
      "unknown fallback",
      { model: MODEL, messages, fallback_models: ["nope"] },
      404,
      "unknown_model",
      "fallback_models.0",
    ],
    ["unknown policy", { model: MODEL, messages, policy: "nope" }, 400, "unknown_policy", "policy"],
    [
      "misspelt field",
      { model: MODEL, messages, temprature: 1 },
      400,
      "invalid_request",
      "temprature",
    ],
    ["no node", { model: UNSERVED, messages }, 503, "no_node_available", "model"],
  ])("%s", async (_name, req, status, code, param) => {
    const e = await failure(zml().infer(req as never));
    expect(e).toBeInstanceOf(ZmlApiError);
    expect([e.status, e.code, e.param]).toEqual([status, code, param]);
  });

  it("a wrong key is unauthorized", async () => {
    const e = await failure(createClient({ baseUrl: stack.intakeUrl, apiKey: "wrong" }).models());
    expect([e.status, e.code, e.param]).toEqual([401, "unauthorized", "authorization"]);
  });
});
