import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { readChatStream } from "../support/chat-stream.ts";

/**
 * Acceptance: the official openai npm SDK against the gateway — chat completions streamed
 * and not, `withResponse()` exposing `x-zml-routing`, and the `models` fallback list.
 */

const OTHER = "mistral-7b-instruct";
const UNSERVED = "unserved-model";
let stack: Stack;

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      { nodeId: "mi300x-a", family: "MI300X", models: [OTHER] },
    ],
    // UNSERVED is a known model that no node serves: a request for it can only succeed
    // through its fallbacks.
    fleet: { models: [{ id: MODEL }, { id: OTHER }, { id: UNSERVED }] },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const client = () =>
  new OpenAI({ apiKey: API_KEY, baseURL: `${stack.intakeUrl}/v1`, maxRetries: 0 });
const messages = [{ role: "user" as const, content: "Say hello" }];

/** ZML's fields ride alongside the OpenAI parameters; the SDK sends them as given. */
type WithZml<T> = T & { models?: string[]; policy?: string; tier?: number };

describe("chat completions through the openai SDK", () => {
  it("returns a completion and exposes x-zml-routing through withResponse()", async () => {
    const { data, response } = await client()
      .chat.completions.create({ model: MODEL, messages, temperature: 0.1 })
      .withResponse();
    expect(data.object).toBe("chat.completion");
    expect(data.choices[0]?.message.content).toBeTruthy();
    const routing = parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!);
    expect(routing).toMatchObject({ node: "h100-a", family: "H100", tier: 1, attempts: 1 });
  });

  it("streams, with the routing header on the stream's response", async () => {
    const { data: stream, response } = await client()
      .chat.completions.create({ model: MODEL, messages, stream: true })
      .withResponse();
    expect(parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!).node).toBe("h100-a");
    const { text, chunks } = await readChatStream(stream);
    expect(chunks).toBeGreaterThan(1);
    expect(text.length).toBeGreaterThan(0);
  });

  it("serves text completions and lists the models", async () => {
    const completion = await client().completions.create({ model: MODEL, prompt: "Hello" });
    expect(completion.choices[0]?.text).toBeTruthy();
    const ids: string[] = [];
    for await (const m of client().models.list()) ids.push(m.id);
    expect(ids.sort()).toEqual([MODEL, OTHER, UNSERVED].sort());
  });
});

describe("the models fallback list", () => {
  it("answers from the first fallback model that can be served", async () => {
    const params: WithZml<OpenAI.ChatCompletionCreateParamsNonStreaming> = {
      model: UNSERVED,
      messages,
      models: [OTHER, MODEL],
    };
    const { data, response } = await client().chat.completions.create(params).withResponse();
    const routing = parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!);
    expect(routing.node).toBe("mi300x-a");
    expect(data.model).toBe(OTHER);
  });

  it("falls back for a streamed request too", async () => {
    const params: WithZml<OpenAI.ChatCompletionCreateParamsStreaming> = {
      model: UNSERVED,
      messages,
      stream: true,
      models: [MODEL],
    };
    const { data: stream, response } = await client()
      .chat.completions.create(params)
      .withResponse();
    expect(parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!).node).toBe("h100-a");
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text.length).toBeGreaterThan(0);
  });

  it("without fallbacks, the unserved model gets a clear 503", async () => {
    const err = await client()
      .chat.completions.create({ model: UNSERVED, messages })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe("no_node_available");
  });
});

describe("errors arrive as the SDK's error classes with ZML's codes", () => {
  it("maps status and code for tier, model and policy mistakes", async () => {
    const cases: Array<
      [WithZml<OpenAI.ChatCompletionCreateParamsNonStreaming>, unknown, string, string]
    > = [
      [
        { model: MODEL, messages, tier: 3 },
        OpenAI.PermissionDeniedError,
        "tier_not_allowed",
        "tier",
      ],
      [{ model: "no-such-model", messages }, OpenAI.NotFoundError, "unknown_model", "model"],
      [
        { model: MODEL, messages, policy: "no-such-policy" },
        OpenAI.BadRequestError,
        "unknown_policy",
        "policy",
      ],
      [
        { model: MODEL, messages, models: ["nope"] },
        OpenAI.NotFoundError,
        "unknown_model",
        "models.0",
      ],
    ];
    for (const [params, cls, code, param] of cases) {
      const err = await client()
        .chat.completions.create(params)
        .catch((e: unknown) => e);
      expect(err, code).toBeInstanceOf(cls);
      expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe(code);
      expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe(param);
    }
  });
});
