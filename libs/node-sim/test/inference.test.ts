import { request as httpRequest } from "node:http";
import { describe, expect, it } from "vitest";
import { startSimNode } from "../src/index.ts";
import { CHAT_BODY, chunksOf, post, readJson, sseData } from "./helpers.ts";
import type { ChatCompletion, ErrorEnvelope, TextCompletion } from "./helpers.ts";

const MODELS = ["llama-3-8b", "mistral-7b"];

describe("chat completions (vllm)", () => {
  it("answers a non-streamed request with the OpenAI chat.completion shape", async () => {
    await using node = await startSimNode({ nodeId: "h100-a", flavour: "vllm", models: MODELS });
    const res = await post(`${node.url}/v1/chat/completions`, {
      ...CHAT_BODY,
      model: "mistral-7b",
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-sim-node")).toBe("h100-a");
    expect(res.headers.get("content-type")).toBe("application/json");
    const body = await readJson<ChatCompletion>(res);
    expect(body).toMatchObject({
      object: "chat.completion",
      model: "mistral-7b",
      choices: [{ index: 0, message: { role: "assistant" }, finish_reason: "stop" }],
      usage: { completion_tokens: 16 },
    });
    expect(body.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(Number.isInteger(body.created)).toBe(true);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 16);
    expect(body.choices[0]!.message.content.split(" ")).toHaveLength(16);
  });

  it("answers with the words it was given, whole and streamed", async () => {
    await using node = await startSimNode({
      nodeId: "h100-a",
      flavour: "vllm",
      models: MODELS,
      reply: "alpha beta",
      completionTokens: 3,
    });
    const res = await post(`${node.url}/v1/chat/completions`, CHAT_BODY);
    expect((await readJson<ChatCompletion>(res)).choices[0]!.message.content).toBe(
      "alpha beta alpha",
    );
    const stream = await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, stream: true });
    expect(await stream.text()).toContain('"content":" beta"');
  });

  it("generates the same text every time and honours max_tokens with finish_reason length", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const chat = async (body: unknown): Promise<ChatCompletion> =>
      readJson<ChatCompletion>(await post(`${node.url}/v1/chat/completions`, body));
    const a = await chat(CHAT_BODY);
    const b = await chat(CHAT_BODY);
    expect(a.choices[0]!.message.content).toBe(b.choices[0]!.message.content);

    const limited = await chat({ ...CHAT_BODY, max_completion_tokens: 3 });
    expect(limited.choices[0]!.finish_reason).toBe("length");
    expect(limited.usage.completion_tokens).toBe(3);
    expect(a.choices[0]!.message.content.startsWith(limited.choices[0]!.message.content)).toBe(
      true,
    );

    const larger = await chat({ ...CHAT_BODY, max_tokens: 100 });
    expect(larger.usage.completion_tokens).toBe(16);
    expect(larger.choices[0]!.finish_reason).toBe("stop");
  });

  it("streams chat.completion.chunk events, the usage chunk and [DONE]", async () => {
    await using node = await startSimNode({
      nodeId: "n",
      flavour: "vllm",
      models: MODELS,
      completionTokens: 4,
      tokensPerSecond: 1000,
    });
    const res = await post(`${node.url}/v1/chat/completions`, {
      ...CHAT_BODY,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    const data = sseData(text);
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = chunksOf(data);
    // role chunk, 4 token chunks, usage chunk
    expect(chunks).toHaveLength(6);
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({ object: "chat.completion.chunk", model: "llama-3-8b" });
      expect(chunk.id).toBe(chunks[0]!.id);
    }
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    const tokens = chunks.slice(1, 5).map((c) => c.choices[0]!);
    expect(tokens.map((c) => c.finish_reason)).toEqual([null, null, null, "stop"]);
    const content = tokens.map((c) => c.delta?.content).join("");
    expect(content.split(" ")).toHaveLength(4);
    expect(chunks[5]!.choices).toEqual([]);
    expect(chunks[5]!.usage).toMatchObject({ completion_tokens: 4 });
  });

  it("leaves the usage chunk out unless include_usage is set", async () => {
    await using node = await startSimNode({
      nodeId: "n",
      flavour: "vllm",
      models: MODELS,
      completionTokens: 2,
    });
    const text = await (
      await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, stream: true })
    ).text();
    const data = sseData(text);
    expect(data).toHaveLength(4);
    expect(chunksOf(data).every((c) => !("usage" in c))).toBe(true);
  });
});

describe("completions", () => {
  it("answers text_completion bodies and streams", async () => {
    await using node = await startSimNode({
      nodeId: "n",
      flavour: "vllm",
      models: MODELS,
      completionTokens: 3,
    });
    const body = await readJson<TextCompletion>(
      await post(`${node.url}/v1/completions`, { model: "llama-3-8b", prompt: "Once upon" }),
    );
    expect(body).toMatchObject({
      object: "text_completion",
      model: "llama-3-8b",
      choices: [{ index: 0, finish_reason: "stop" }],
      usage: { completion_tokens: 3 },
    });
    expect(body.id).toMatch(/^cmpl-/);

    const text = await (
      await post(`${node.url}/v1/completions`, {
        model: "llama-3-8b",
        prompt: [1, 2, 3],
        stream: true,
        stream_options: { include_usage: true },
      })
    ).text();
    const data = sseData(text);
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = chunksOf(data);
    expect(chunks).toHaveLength(4);
    expect(
      chunks
        .slice(0, 3)
        .map((c) => c.choices[0]!.text)
        .join(""),
    ).toBe(body.choices[0]!.text);
    expect(chunks.every((c) => c.object === "text_completion")).toBe(true);
    expect(chunks[3]!.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
  });
});

describe("tgi flavour", () => {
  it("speaks the OpenAI API with TGI's details", async () => {
    await using node = await startSimNode({
      nodeId: "t",
      flavour: "tgi",
      models: MODELS,
      completionTokens: 2,
    });
    const body = await readJson<ChatCompletion>(
      await post(`${node.url}/v1/chat/completions`, CHAT_BODY),
    );
    expect(body).toMatchObject({ object: "chat.completion", id: "", model: "llama-3-8b" });
    expect(body.system_fingerprint).toMatch(/native$/);

    const text = await (
      await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, stream: true })
    ).text();
    const data = sseData(text);
    expect(data).toHaveLength(3);
    const chunks = chunksOf(data);
    expect(chunks[0]!.choices[0]!.delta?.role).toBe("assistant");
    expect(chunks[1]!.choices[0]!.finish_reason).toBe("stop");
    expect(chunks[1]!.usage).toBeNull();

    const health = await fetch(`${node.url}/health`);
    expect(health.status).toBe(200);
  });
});

describe("bad input", () => {
  it("answers an unknown model with a vLLM-style 404", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const res = await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, model: "gpt-9" });
    expect(res.status).toBe(404);
    expect(res.headers.get("x-sim-node")).toBe("n");
    expect(await readJson<ErrorEnvelope>(res)).toEqual({
      error: {
        message: "The model `gpt-9` does not exist.",
        type: "NotFoundError",
        param: "model",
        code: 404,
      },
    });
  });

  it("answers bad JSON and bad fields with 400", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const cases: [string, unknown, string | null][] = [
      ["/v1/chat/completions", "{not json", null],
      ["/v1/chat/completions", "", null],
      ["/v1/chat/completions", "[]", null],
      ["/v1/chat/completions", { model: "llama-3-8b" }, "messages"],
      ["/v1/chat/completions", { messages: CHAT_BODY.messages }, "model"],
      ["/v1/chat/completions", { ...CHAT_BODY, max_tokens: 0 }, "max_tokens"],
      ["/v1/chat/completions", { ...CHAT_BODY, stream: "yes" }, "stream"],
      ["/v1/chat/completions", { ...CHAT_BODY, messages: [42] }, "messages.0"],
      ["/v1/completions", { model: "llama-3-8b" }, "prompt"],
      ["/v1/completions", { model: "llama-3-8b", prompt: [{}] }, "prompt"],
    ];
    for (const [path, body, param] of cases) {
      const res = await post(`${node.url}${path}`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = await readJson<ErrorEnvelope>(res);
      expect(error).toMatchObject({ type: "BadRequestError", code: 400, param });
    }
    // The node is still serving.
    expect((await post(`${node.url}/v1/chat/completions`, CHAT_BODY)).status).toBe(200);
  });

  it("answers 413 above 8 MiB and keeps serving", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    const big = JSON.stringify({ ...CHAT_BODY, padding: "x".repeat(8 * 1024 * 1024) });
    const res = await post(`${node.url}/v1/chat/completions`, big);
    expect(res.status).toBe(413);
    await res.arrayBuffer();
    expect(node.stats().payloads_received).toBe(0);

    // Without a declared length (chunked upload) the limit holds too.
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${node.url}/v1/completions`, { method: "POST" }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      req.on("error", reject);
      for (let i = 0; i < 9; i++) req.write(Buffer.alloc(1024 * 1024, 0x20));
      req.end();
    });
    expect(status).toBe(413);
    expect((await post(`${node.url}/v1/chat/completions`, CHAT_BODY)).status).toBe(200);
  });

  it("answers unknown paths with 404 and wrong methods with 405", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS });
    expect((await fetch(`${node.url}/nope`)).status).toBe(404);
    expect((await fetch(`${node.url}/v1/chat/completions`)).status).toBe(405);
    expect((await fetch(`${node.url}/health`, { method: "POST" })).status).toBe(405);
    const models = await readJson<{ data: { id: string }[] }>(await fetch(`${node.url}/v1/models`));
    expect(models.data.map((m) => m.id)).toEqual(MODELS);
  });

  it("rejects bad options", async () => {
    await expect(startSimNode({ nodeId: "", flavour: "vllm", models: MODELS })).rejects.toThrow(
      /nodeId/,
    );
    await expect(startSimNode({ nodeId: "n", flavour: "vllm", models: [] })).rejects.toThrow(
      /models/,
    );
    await expect(
      startSimNode({ nodeId: "n", flavour: "vllm", models: MODELS, maxConcurrency: 0 }),
    ).rejects.toThrow(/maxConcurrency/);
  });
});
