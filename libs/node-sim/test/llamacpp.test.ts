// The llama.cpp flavour: the wire format, metrics, /health and /slots of llama-server, as the
// real server (build b1-80fb11a) writes them; compared with shapes captured from it.
import { describe, expect, it } from "vitest";
import { startSimNode } from "../src/index.ts";
import { CHAT_BODY, metricValue, post, sseData, waitFor } from "./helpers.ts";

describe("llama.cpp flavour", () => {
  it("answers a chat completion with llama-server's keys, in its order", async () => {
    await using node = await startSimNode({
      nodeId: "l",
      flavour: "llamacpp",
      models: ["tiny"],
      completionTokens: 3,
    });
    const text = await (
      await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, model: "tiny" })
    ).text();
    const body = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual([
      "choices",
      "created",
      "model",
      "system_fingerprint",
      "object",
      "usage",
      "id",
    ]);
    expect(body).toMatchObject({
      choices: [{ finish_reason: "stop", index: 0, message: { role: "assistant" } }],
      model: "tiny",
      system_fingerprint: "b1-80fb11a",
      object: "chat.completion",
      usage: { completion_tokens: 3, prompt_tokens_details: { cached_tokens: 0 } },
    });
    expect(body["id"]).toMatch(/^chatcmpl-[A-Za-z0-9]{32}$/);
  });

  it("streams a role event, one event per token, a finish event and the usage event", async () => {
    await using node = await startSimNode({
      nodeId: "l",
      flavour: "llamacpp",
      models: ["tiny"],
      completionTokens: 2,
    });
    const res = await post(`${node.url}/v1/chat/completions`, {
      ...CHAT_BODY,
      model: "tiny",
      stream: true,
      stream_options: { include_usage: true },
    });
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, unknown>);
    expect(chunks.map((c) => c["choices"])).toEqual([
      [{ finish_reason: null, index: 0, delta: { role: "assistant", content: null } }],
      [{ finish_reason: null, index: 0, delta: { content: expect.any(String) as string } }],
      [{ finish_reason: null, index: 0, delta: { content: expect.any(String) as string } }],
      [{ finish_reason: "stop", index: 0, delta: {} }],
      [],
    ]);
    expect(Object.keys(chunks[1]!)).toEqual([
      "choices",
      "created",
      "id",
      "model",
      "system_fingerprint",
      "object",
    ]);
    expect(chunks.at(-1)!["usage"]).toMatchObject({ completion_tokens: 2 });
  });

  it("exposes llamacpp: metrics, with running and deferred requests", async () => {
    await using node = await startSimNode({
      nodeId: "l",
      flavour: "llamacpp",
      models: ["tiny"],
      maxConcurrency: 2,
      ttftMs: 60_000,
    });
    const abort = new AbortController();
    const pending = Array.from({ length: 3 }, () =>
      post(
        `${node.url}/v1/chat/completions`,
        { ...CHAT_BODY, model: "tiny" },
        { signal: abort.signal },
      ).catch(() => "aborted"),
    );
    const text = await waitFor(
      async () => (await fetch(`${node.url}/metrics`)).text(),
      (t) => metricValue(t, "llamacpp:requests_deferred") === 1,
      "1 deferred request",
    );
    expect(metricValue(text, "llamacpp:requests_processing")).toBe(2);
    for (const [name, type] of [
      ["prompt_tokens_total", "counter"],
      ["prompt_tokens_cached_total", "counter"],
      ["prompt_seconds_total", "counter"],
      ["tokens_predicted_total", "counter"],
      ["tokens_predicted_seconds_total", "counter"],
      ["prompt_tokens_seconds", "gauge"],
      ["predicted_tokens_seconds", "gauge"],
    ] as const) {
      expect(text).toContain(`# TYPE llamacpp:${name} ${type}\n`);
    }
    const slots = (await (await fetch(`${node.url}/slots`)).json()) as Array<{
      id: number;
      n_ctx: number;
      is_processing: boolean;
    }>;
    expect(slots.map((s) => [s.id, s.is_processing])).toEqual([
      [0, true],
      [1, true],
    ]);
    expect(slots.every((s) => s.n_ctx === 4096)).toBe(true);
    abort.abort();
    await Promise.all(pending);
  });

  it("answers /health as llama-server does, and 503 Loading model under the health fault", async () => {
    await using node = await startSimNode({ nodeId: "l", flavour: "llamacpp", models: ["tiny"] });
    const ok = await fetch(`${node.url}/health`);
    expect([ok.status, await ok.text()]).toEqual([200, '{"status":"ok"}']);
    node.setFault({ kind: "health_fail", times: 1 });
    const loading = await fetch(`${node.url}/health`);
    expect(loading.status).toBe(503);
    expect(await loading.json()).toEqual({
      error: { message: "Loading model", type: "unavailable_error", code: 503 },
    });
    // Other flavours have no /slots.
    await using vllm = await startSimNode({ nodeId: "v", flavour: "vllm", models: ["tiny"] });
    expect((await fetch(`${vllm.url}/slots`)).status).toBe(404);
  });
});
