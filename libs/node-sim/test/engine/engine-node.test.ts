// A node with the engine model, over real HTTP: what it answers, what its vLLM metrics and
// stats say about the prefix cache, and how bad options and oversized prompts are refused.
import { describe, expect, it } from "vitest";
import { SimInputError, startSimNode } from "../../src/index.ts";
import type { SimNode } from "../../src/index.ts";
import { parsePrometheusText } from "@zml/health";
import { metricValue, post, sseData } from "../helpers.ts";

const SYSTEM = "You are the assistant of tenant one. ".repeat(60);
const LABELS = '{model_name="llama-3-8b",engine="0"}';

function chat(user: string, extra: Record<string, unknown> = {}) {
  return {
    model: "llama-3-8b",
    messages: [
      { role: "system", content: SYSTEM },
      { role: "user", content: user },
    ],
    ...extra,
  };
}

/** The simulator's token estimate of the rendered chat (roles and contents). */
function renderedTokens(user: string): number {
  return Math.ceil(`<|system|>\n${SYSTEM}\n<|user|>\n${user}\n`.length / 4);
}

async function engineNode(): Promise<SimNode> {
  return startSimNode({
    nodeId: "e",
    flavour: "vllm",
    models: ["llama-3-8b"],
    maxConcurrency: 4,
    completionTokens: 4,
    engine: { kvCacheBlocks: 256, prefillTokensPerSecond: 50_000, stepBaseMs: 1 },
  });
}

const scrape = async (node: SimNode) => (await fetch(`${node.url}/metrics`)).text();

describe("engine node", () => {
  it("answers from the engine and counts prefix-cache queries and hits in tokens", async () => {
    await using node = await engineNode();
    const tokens = renderedTokens("hello");
    const first = (await (await post(`${node.url}/v1/chat/completions`, chat("hello"))).json()) as {
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(first.usage).toMatchObject({ prompt_tokens: tokens, completion_tokens: 4 });
    const stream = await post(
      `${node.url}/v1/chat/completions`,
      chat("hello", { stream: true, stream_options: { include_usage: true } }),
    );
    const events = sseData(await stream.text());
    expect(events.at(-1)).toBe("[DONE]");

    const text = await scrape(node);
    // The second request found every full block but the one holding the last token.
    const hits = Math.floor((tokens - 1) / 16) * 16;
    expect(metricValue(text, `vllm:prefix_cache_queries_total${LABELS}`)).toBe(2 * tokens);
    expect(metricValue(text, `vllm:prefix_cache_hits_total${LABELS}`)).toBe(hits);
    expect(metricValue(text, `vllm:prompt_tokens_total${LABELS}`)).toBe(2 * tokens);
    expect(metricValue(text, `vllm:generation_tokens_total${LABELS}`)).toBe(8);
    expect(metricValue(text, `vllm:time_to_first_token_seconds_count${LABELS}`)).toBe(2);
    expect(metricValue(text, `vllm:request_prefill_time_seconds_count${LABELS}`)).toBe(2);
    expect(metricValue(text, `vllm:inter_token_latency_seconds_count${LABELS}`)).toBe(6);
    expect(metricValue(text, `vllm:num_requests_running${LABELS}`)).toBe(0);
    expect(metricValue(text, `vllm:kv_cache_usage_perc${LABELS}`)).toBe(0);
    expect(metricValue(text, `vllm:gpu_cache_usage_perc${LABELS}`)).toBe(0);
    expect(text).toContain("# TYPE vllm:prefix_cache_hits_total counter\n");
    expect(text).toContain("# TYPE vllm:time_to_first_token_seconds histogram\n");
    expect(parsePrometheusText(text).series.get("vllm:cache_config_info")).toEqual([
      {
        name: "vllm:cache_config_info",
        labels: {
          block_size: "16",
          gpu_memory_utilization: "0.9",
          cache_dtype: "auto",
          enable_prefix_caching: "True",
          prefix_caching_hash_algo: "sha256",
          num_gpu_blocks: "256",
          num_cpu_blocks: "None",
          engine: "0",
        },
        value: 1,
        timestamp: null,
      },
    ]);
    expect(
      metricValue(
        text,
        `vllm:request_success_total{model_name="llama-3-8b",engine="0",finished_reason="stop"}`,
      ),
    ).toBe(2);

    expect(node.stats().engine).toMatchObject({
      kv_cache_blocks: 256,
      prefix_cache_queries: 2 * tokens,
      prefix_cache_hits: hits,
      cached_blocks: Math.floor(tokens / 16),
    });
  });

  it("forgets its cache on POST /reset_prefix_cache, as vLLM does", async () => {
    await using node = await engineNode();
    await (await post(`${node.url}/v1/chat/completions`, chat("a"))).text();
    expect(node.stats().engine?.cached_blocks).toBeGreaterThan(0);
    const reset = await fetch(`${node.url}/reset_prefix_cache`, { method: "POST" });
    expect(reset.status).toBe(200);
    expect(node.stats().engine?.cached_blocks).toBe(0);
    await (await post(`${node.url}/v1/chat/completions`, chat("a"))).text();
    expect(node.stats().engine?.prefix_cache_hits).toBe(0);
  });

  it("answers 400 to a prompt its KV cache could never hold", async () => {
    await using node = await engineNode();
    const res = await post(`${node.url}/v1/chat/completions`, {
      model: "llama-3-8b",
      messages: [{ role: "user", content: "x".repeat(256 * 16 * 4) }],
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; type: string } };
    expect(body.error.type).toBe("BadRequestError");
    expect(body.error.message).toMatch(/KV-cache blocks/);
  });

  it("refuses an engine on a TGI node and unknown engine fields, naming the field", async () => {
    const base = { nodeId: "x", models: ["m"] };
    await expect(startSimNode({ ...base, flavour: "tgi", engine: {} })).rejects.toMatchObject({
      code: "invalid_options",
      field: "options.engine",
    });
    await expect(
      startSimNode({
        ...base,
        flavour: "vllm",
        engine: { kvCacheBlocks: 0 },
      }),
    ).rejects.toBeInstanceOf(SimInputError);
    await expect(
      startSimNode({ ...base, flavour: "vllm", engine: { blocks: 3 } as never }),
    ).rejects.toMatchObject({ field: "options.engine.blocks" });
  });

  it("a node without engine serves no /reset_prefix_cache", async () => {
    await using node = await startSimNode({ nodeId: "p", flavour: "vllm", models: ["m"] });
    expect((await fetch(`${node.url}/reset_prefix_cache`, { method: "POST" })).status).toBe(404);
    expect(() => node.resetPrefixCache()).toThrow(SimInputError);
  });
});
