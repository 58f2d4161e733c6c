import { createOpenAI } from "@ai-sdk/openai";
import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { generateText, streamText } from "ai";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/**
 * Acceptance: the rest of the OpenAI surface clients use — the Responses API (streamed and
 * not), embeddings and model retrieval — through the official openai SDK and the Vercel AI
 * SDK's default `openai(model)` (which calls the Responses API), each with only the base
 * URL and key changed. Each request goes only to a node that declares its API.
 */

const EMBEDDER = "org/text-embedder";
let stack: Stack;

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      // First in the model's policy, but serves chat and completions only (the default).
      { nodeId: "chat-only", family: "H100" },
      { nodeId: "full", family: "MI300X", apis: ["chat", "completions", "responses"] },
      { nodeId: "embed", family: "L4", models: [EMBEDDER], apis: ["embeddings"] },
    ],
    fleet: {
      models: [{ id: MODEL, default_policy: "h100-first" }, { id: EMBEDDER }],
      policies: [chainPolicy("h100-first", ["H100", "MI300X"])],
    },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const client = () =>
  new OpenAI({ apiKey: API_KEY, baseURL: `${stack.intakeUrl}/v1`, maxRetries: 0 });
const nodeOf = (response: Response) =>
  parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!).node;

describe("the Responses API through the openai SDK", () => {
  it("answers responses.create, from a node that serves the Responses API", async () => {
    const { data, response } = await client()
      .responses.create({ model: MODEL, input: "Say hello", max_output_tokens: 8 })
      .withResponse();
    expect(data.object).toBe("response");
    expect(data.output_text.split(" ")).toHaveLength(8);
    expect(data.usage?.output_tokens).toBe(8);
    expect(nodeOf(response)).toBe("full");
  });

  it("streams typed events up to response.completed", async () => {
    const { data: stream, response } = await client()
      .responses.create({ model: MODEL, input: [{ role: "user", content: "Hi" }], stream: true })
      .withResponse();
    expect(nodeOf(response)).toBe("full");
    const types: string[] = [];
    let text = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
    }
    expect(types[0]).toBe("response.created");
    expect(types.at(-1)).toBe("response.completed");
    expect(text.split(" ")).toHaveLength(16);
  });

  it("a stream that breaks ends with the API's error event, which the SDK raises", async () => {
    stack.sims.get("full")!.setFault({ kind: "cut_stream", afterChunks: 6, times: 1 });
    const stream = await client().responses.create({ model: MODEL, input: "Hi", stream: true });
    const types: string[] = [];
    const error = await (async () => {
      for await (const event of stream) types.push(event.type);
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).code).toBe("stream_interrupted");
    // Every event before the break arrived whole; the answer never completed.
    expect(types.slice(0, 2)).toEqual(["response.created", "response.in_progress"]);
    expect(types).not.toContain("response.completed");
  });

  it("chat still goes to the node the policy prefers", async () => {
    const { response } = await client()
      .chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }] })
      .withResponse();
    expect(nodeOf(response)).toBe("chat-only");
  });
});

describe("embeddings and models through the openai SDK", () => {
  it("answers embeddings.create (the SDK asks for base64 and decodes it)", async () => {
    const { data, response } = await client()
      .embeddings.create({ model: EMBEDDER, input: ["first", "second"] })
      .withResponse();
    expect(nodeOf(response)).toBe("embed");
    expect(data.data).toHaveLength(2);
    const [a, b] = data.data.map((d) => d.embedding);
    expect(a).toHaveLength(64);
    expect(Math.hypot(...a!)).toBeCloseTo(1, 4);
    expect(a).not.toEqual(b);
    expect(data.usage.prompt_tokens).toBeGreaterThan(0);
  });

  it("refuses embeddings for a model no embedding node serves, without a retry", async () => {
    const error = await client()
      .embeddings.create({ model: MODEL, input: "x" })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("api_not_served");
  });

  it("answers models.retrieve, a slash in the id included", async () => {
    expect(await client().models.retrieve(EMBEDDER)).toMatchObject({
      id: EMBEDDER,
      object: "model",
    });
    const missing = await client()
      .models.retrieve("no-such-model")
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe("the Vercel AI SDK's default openai(model)", () => {
  const provider = () => createOpenAI({ apiKey: API_KEY, baseURL: `${stack.intakeUrl}/v1` });

  it("generateText", async () => {
    const result = await generateText({
      model: provider()(MODEL),
      prompt: "Say hello",
      maxRetries: 0,
    });
    expect(result.text.split(" ")).toHaveLength(16);
    expect(result.finishReason).toBe("stop");
    expect(result.usage.outputTokens).toBe(16);
    expect(nodeOf(new Response(null, { headers: result.response.headers }))).toBe("full");
  });

  it("streamText", async () => {
    const result = streamText({ model: provider()(MODEL), prompt: "Say hello", maxRetries: 0 });
    let text = "";
    for await (const delta of result.textStream) text += delta;
    expect(text.split(" ")).toHaveLength(16);
    expect(await result.finishReason).toBe("stop");
  });
});
