import { describe, expect, it } from "vitest";
import { startSimNode } from "../src/index.ts";
import { post } from "./helpers.ts";

const MODELS = ["llama-3-8b", "org/embedder"];

interface SseEvent {
  event: string;
  data: { type: string; sequence_number: number } & Record<string, unknown>;
}

function events(text: string): SseEvent[] {
  return text
    .split("\n\n")
    .filter(Boolean)
    .map((block) => {
      const [eventLine, dataLine] = block.split("\n");
      return {
        event: eventLine!.slice("event: ".length),
        data: JSON.parse(dataLine!.slice("data: ".length)) as SseEvent["data"],
      };
    });
}

describe("the Responses API", () => {
  it("answers with a response object whose message holds the generated text", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const res = await post(`${node.url}/v1/responses`, { model: "llama-3-8b", input: "Hi" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      id: string;
      usage: { input_tokens: number; total_tokens: number };
      output: { content: { type: string; text: string }[] }[];
    };
    expect(body).toMatchObject({
      object: "response",
      status: "completed",
      model: "llama-3-8b",
      incomplete_details: null,
      usage: { output_tokens: 16 },
    });
    expect(body.id).toMatch(/^resp_[0-9a-f]{32}$/);
    const message = body.output[0]!;
    expect(message).toMatchObject({ type: "message", role: "assistant", status: "completed" });
    expect(message.content[0]!.type).toBe("output_text");
    expect(message.content[0]!.text.split(" ")).toHaveLength(16);
    expect(body.usage.total_tokens).toBe(body.usage.input_tokens + 16);
  });

  it("streams typed events numbered from 0, ending with response.completed and no [DONE]", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const res = await post(`${node.url}/v1/responses`, {
      model: "llama-3-8b",
      input: [{ role: "user", content: "Hi" }],
      stream: true,
      max_output_tokens: 3,
    });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text).not.toContain("[DONE]");
    const list = events(text);
    expect(list.map((e) => e.event)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      // max_output_tokens cut the answer short.
      "response.incomplete",
    ]);
    list.forEach((e, i) => {
      expect(e.data.type).toBe(e.event);
      expect(e.data.sequence_number).toBe(i);
    });
    const deltas = list.filter((e) => e.event === "response.output_text.delta");
    const done = list.find((e) => e.event === "response.output_text.done")!;
    expect(deltas.map((e) => e.data.delta).join("")).toBe(done.data.text);
    expect(list.at(-1)!.data.response).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
    });
  });

  it("rejects a body without input as vLLM does", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const res = await post(`${node.url}/v1/responses`, { model: "llama-3-8b" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe("input");
  });
});

describe("embeddings", () => {
  it("embeds each input as a unit vector that depends only on model and text", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const embed = async (body: Record<string, unknown>) =>
      (await (await post(`${node.url}/v1/embeddings`, body)).json()) as {
        object: string;
        data: { object: string; index: number; embedding: number[] | string }[];
        usage: { prompt_tokens: number; total_tokens: number };
      };
    const a = await embed({ model: "org/embedder", input: ["one", "two", "one"] });
    expect(a.object).toBe("list");
    expect(a.data.map((d) => d.index)).toEqual([0, 1, 2]);
    const [one, two, again] = a.data.map((d) => d.embedding as number[]);
    expect(one).toHaveLength(64);
    expect(one).toEqual(again);
    expect(one).not.toEqual(two);
    expect(Math.hypot(...one!)).toBeCloseTo(1, 5);
    expect(a.usage.total_tokens).toBe(a.usage.prompt_tokens);

    // base64: the little-endian float32 bytes of the same vector.
    const b = await embed({ model: "org/embedder", input: "one", encoding_format: "base64" });
    const bytes = Buffer.from(b.data[0]!.embedding as string, "base64");
    const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
    expect(decoded).toEqual(one);

    const short = await embed({ model: "org/embedder", input: "one", dimensions: 8 });
    expect(short.data[0]!.embedding).toHaveLength(8);
  });

  it("answers 400 naming a bad field and 404 for a model it does not serve", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const bad = await post(`${node.url}/v1/embeddings`, { model: "org/embedder", input: [] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe("input");
    const unknown = await post(`${node.url}/v1/embeddings`, { model: "nope", input: "x" });
    expect(unknown.status).toBe(404);
  });
});

describe("one model", () => {
  it("is served at /v1/models/{id}, the id URL-encoded", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const res = await fetch(`${node.url}/v1/models/org%2Fembedder`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: "org/embedder", object: "model" });
    expect((await fetch(`${node.url}/v1/models/nope`)).status).toBe(404);
  });
});
