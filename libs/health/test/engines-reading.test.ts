// The llama.cpp and SGLang readers, the prefix-cache / prefill / capacity figures of every
// engine, and the framework hints: against a real llama-server capture, SGLang's documented
// form and vLLM's real captures plus series in vLLM V1's own format.
import { describe, expect, it } from "vitest";
import { MetricsReadError, guessFramework, readMetrics } from "../src/index.ts";
import { fixture } from "./helpers.ts";

function readError(run: () => unknown): MetricsReadError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(MetricsReadError);
    return error as MetricsReadError;
  }
  throw new Error("expected a MetricsReadError");
}

describe("readMetrics: llama.cpp (real llama-server capture)", () => {
  const loaded = fixture("llamacpp-b1-80fb11a-loaded.prom");

  it("reads busy slots as running and deferred requests as waiting", () => {
    expect(readMetrics("llamacpp", loaded)).toEqual({
      running: 2,
      waiting: 3,
      queueDepth: 5,
      kvCacheUsage: null,
      freeMemoryGib: null,
      // prompt_tokens_total (152, computed) + prompt_tokens_cached_total (266).
      promptTokensTotal: 418,
      generationTokensTotal: 40,
      tokenLatency: { seconds: 0.002667, count: 40 },
      instanceId: null,
      prefixCache: { kind: "counters", queries: 418, hits: 266 },
      prefill: { tokens: 152, seconds: 0.018902 },
      // From /slots, which the probe reads beside the metrics.
      kvCacheCapacityTokens: null,
      servedModels: null,
      slots: null,
    });
  });

  it("names both missing gauges and says the text is vLLM's when it is", () => {
    const error = readError(() => readMetrics("llamacpp", fixture("vllm-v0-qwen3-0.6b.prom")));
    expect(error.missing).toEqual(["llamacpp:requests_processing", "llamacpp:requests_deferred"]);
    expect(error.message).toContain("register the node with framework: vllm");
  });
});

describe("readMetrics: SGLang (documented form)", () => {
  const docs = fixture("sglang-docs-form.prom");

  it("reads running and queued requests, token usage, cache hit rate and token counters", () => {
    expect(readMetrics("sglang", docs)).toEqual({
      running: 162,
      waiting: 2826,
      queueDepth: 2988,
      kvCacheUsage: 0.28,
      freeMemoryGib: null,
      promptTokensTotal: 8_128_902,
      generationTokensTotal: 7_557_572,
      tokenLatency: { seconds: 866964.5791549598, count: 7_557_572 },
      instanceId: null,
      prefixCache: { kind: "rate", hitRate: 0.007507552643049313 },
      prefill: null,
      kvCacheCapacityTokens: null,
      servedModels: null,
      slots: null,
    });
  });

  it("reads the sglang_ prefix of newer releases, and only tensor-parallel rank 0", () => {
    const text = [
      "# TYPE sglang_num_running_reqs gauge",
      'sglang_num_running_reqs{model_name="m",tp_rank="0"} 4',
      'sglang_num_running_reqs{model_name="m",tp_rank="1"} 4',
      "# TYPE sglang_num_queue_reqs gauge",
      'sglang_num_queue_reqs{model_name="m",tp_rank="0"} 1',
      'sglang_num_queue_reqs{model_name="m",tp_rank="1"} 1',
      "# TYPE sglang_max_total_num_tokens gauge",
      'sglang_max_total_num_tokens{model_name="m",tp_rank="0"} 500000',
      'sglang_max_total_num_tokens{model_name="m",tp_rank="1"} 500000',
    ].join("\n");
    expect(readMetrics("sglang", text)).toMatchObject({
      running: 4,
      waiting: 1,
      queueDepth: 5,
      kvCacheCapacityTokens: 500_000,
      servedModels: null,
      slots: null,
    });
  });

  it("says a llama.cpp text is llama.cpp's", () => {
    const error = readError(() =>
      readMetrics("sglang", fixture("llamacpp-b1-80fb11a-loaded.prom")),
    );
    expect(error.missing).toEqual(["sglang:num_running_reqs", "sglang:num_queue_reqs"]);
    expect(error.message).toBe(
      "unreadable sglang metrics: missing series sglang:num_running_reqs; missing series " +
        "sglang:num_queue_reqs; these are llama.cpp metrics: register the node with framework: llamacpp",
    );
  });
});

describe("readMetrics: vLLM prefix cache, prefill and capacity", () => {
  const v1 = fixture("vllm-v1-llama-kserve.prom");
  // The series as the real V1 capture has them: one `_total` counter per engine.
  const cacheSeries = (queries: number, hits: number, engine = "0") =>
    `vllm:prefix_cache_queries_total{engine="${engine}",model_name="m"} ${queries}\n` +
    `vllm:prefix_cache_hits_total{engine="${engine}",model_name="m"} ${hits}\n`;

  it("reads the prefix-cache counters of the real V1 capture, and sums them over engines", () => {
    expect(readMetrics("vllm", v1).prefixCache).toEqual({ kind: "counters", queries: 0, hits: 0 });
    const twoEngines =
      "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n" +
      cacheSeries(1000, 250, "0") +
      cacheSeries(500, 50, "1");
    expect(readMetrics("vllm", twoEngines).prefixCache).toEqual({
      kind: "counters",
      queries: 1500,
      hits: 300,
    });
    // vLLM V0 had no such counters.
    expect(readMetrics("vllm", fixture("vllm-v0-qwen3-0.6b.prom")).prefixCache).toBeNull();
  });

  it("takes the prefilled tokens as prompt tokens less prefix-cache hits", () => {
    const text =
      "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n" +
      "vllm:prompt_tokens_total 1000\n" +
      cacheSeries(1000, 400) +
      "# TYPE vllm:request_prefill_time_seconds histogram\n" +
      'vllm:request_prefill_time_seconds_sum{model_name="m"} 0.3\n' +
      'vllm:request_prefill_time_seconds_count{model_name="m"} 3\n';
    expect(readMetrics("vllm", text).prefill).toEqual({ tokens: 600, seconds: 0.3 });
  });

  it("reads capacity as num_gpu_blocks × block_size, unknown while vLLM says None", () => {
    const info = (blocks: string) =>
      "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n" +
      `vllm:cache_config_info{block_size="16",num_gpu_blocks="${blocks}"} 1.0\n`;
    expect(readMetrics("vllm", info("2340")).kvCacheCapacityTokens).toBe(37_440);
    expect(readMetrics("vllm", info("None")).kvCacheCapacityTokens).toBeNull();
  });

  it("reads current vLLM's kv_cache_usage_perc, and the deprecated gpu_cache_usage_perc alone", () => {
    const base = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n";
    expect(
      readMetrics("vllm", `${base}vllm:kv_cache_usage_perc 0.4\nvllm:gpu_cache_usage_perc 0.1\n`)
        .kvCacheUsage,
    ).toBe(0.4);
    expect(readMetrics("vllm", `${base}vllm:gpu_cache_usage_perc 0.1\n`).kvCacheUsage).toBe(0.1);
  });

  it("hints at llama.cpp when a node declared vllm serves llama.cpp metrics", () => {
    const error = readError(() => readMetrics("vllm", fixture("llamacpp-b1-80fb11a-loaded.prom")));
    expect(error.message).toContain(
      "these are llama.cpp metrics: register the node with framework: llamacpp",
    );
  });
});

describe("guessFramework", () => {
  it("names the engine whose series the text carries, and none for a mix or nothing", () => {
    expect(guessFramework(fixture("vllm-v0-qwen3-0.6b.prom"))).toBe("vllm");
    expect(guessFramework(fixture("tgi-assembled.prom"))).toBe("tgi");
    expect(guessFramework(fixture("llamacpp-b1-80fb11a-loaded.prom"))).toBe("llamacpp");
    expect(guessFramework(fixture("sglang-docs-form.prom"))).toBe("sglang");
    expect(guessFramework("sglang_num_running_reqs 1\n")).toBe("sglang");
    expect(guessFramework("vllm:a 1\nllamacpp:b 2\n")).toBeNull();
    expect(guessFramework("process_cpu_seconds_total 1\n")).toBeNull();
  });
});
