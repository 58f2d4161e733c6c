// Each flavour's metric families, as its engine names, types and labels them. The health
// reader and the tests depend on these; prom-client renders them.
import { parsePrometheusText } from "@zml/health";
import { describe, expect, it } from "vitest";
import { createEngineMetrics } from "../src/engine/engine-metrics.ts";
import { createSimMetrics } from "../src/metrics.ts";
import type { MetricsGauges, SimMetrics } from "../src/metrics.ts";

const GAUGES: MetricsGauges = {
  running: 1,
  waiting: 2,
  maxConcurrency: 4,
  batchTokens: 300,
  engine: {
    running: 1,
    waiting: 2,
    kvCacheUsage: 0.25,
    cachedBlocks: 3,
    prefixCacheQueries: 50,
    prefixCacheHits: 16,
    promptTokens: 50,
    generationTokens: 5,
  },
};

/** `type name label,names` of each family, in the order the exposition gives them. */
async function families(metrics: SimMetrics): Promise<string[]> {
  const parsed = parsePrometheusText(await metrics.render(GAUGES));
  return [...parsed.families.values()].map((family) => {
    const labels = new Set(
      family.samples.flatMap((sample) => Object.keys(sample.labels).filter((k) => k !== "le")),
    );
    return `${family.type} ${family.name} ${[...labels].join(",")}`.trim();
  });
}

describe("metric families", () => {
  it("are vLLM's, TGI's and llama.cpp's own", async () => {
    expect(await families(createSimMetrics("vllm", "m", "i"))).toEqual([
      "gauge vllm:num_requests_running model_name",
      "gauge vllm:num_requests_waiting model_name",
      "gauge vllm:gpu_cache_usage_perc model_name",
      "gauge vllm:kv_cache_usage_perc model_name",
      "counter vllm:prompt_tokens_total model_name",
      "counter vllm:generation_tokens_total model_name",
      "counter vllm:request_success_total model_name,finished_reason",
      "histogram vllm:time_to_first_token_seconds model_name",
      "histogram vllm:time_per_output_token_seconds model_name",
      "histogram vllm:e2e_request_latency_seconds model_name",
      "gauge zml_sim_instance_info instance_id",
    ]);
    expect(await families(createSimMetrics("tgi", "m", "i"))).toEqual([
      "counter tgi_request_success",
      "counter tgi_request_count",
      "gauge tgi_queue_size",
      "gauge tgi_batch_current_max_tokens",
      "gauge tgi_batch_current_size",
      "histogram tgi_request_input_length",
      "histogram tgi_request_generated_tokens",
      "histogram tgi_request_queue_duration",
      "histogram tgi_request_mean_time_per_token_duration",
      "histogram tgi_request_duration",
      "gauge zml_sim_instance_info instance_id",
    ]);
    expect(await families(createSimMetrics("llamacpp", "m", "i"))).toEqual([
      "counter llamacpp:prompt_tokens_total",
      "counter llamacpp:prompt_tokens_cached_total",
      "counter llamacpp:prompt_seconds_total",
      "counter llamacpp:tokens_predicted_total",
      "counter llamacpp:tokens_predicted_seconds_total",
      "counter llamacpp:n_decode_total",
      "counter llamacpp:n_tokens_max",
      "gauge llamacpp:prompt_tokens_seconds",
      "gauge llamacpp:predicted_tokens_seconds",
      "gauge llamacpp:requests_processing",
      "gauge llamacpp:requests_deferred",
      "gauge llamacpp:n_busy_slots_per_decode",
      "gauge zml_sim_instance_info instance_id",
    ]);
  });

  it("are vLLM V1's on a node with an engine", async () => {
    const settings = {
      kvCacheBlocks: 64,
      prefillTokensPerSecond: 1000,
      stepBaseMs: 1,
      stepPerSequenceMs: 0,
      maxRunning: 4,
    };
    const metrics = createEngineMetrics({ modelName: "m", instanceId: "i", settings });
    expect(await families(metrics)).toEqual([
      "gauge vllm:num_requests_running model_name,engine",
      "gauge vllm:num_requests_waiting model_name,engine",
      "gauge vllm:gpu_cache_usage_perc model_name,engine",
      "gauge vllm:kv_cache_usage_perc model_name,engine",
      "counter vllm:prefix_cache_queries_total model_name,engine",
      "counter vllm:prefix_cache_hits_total model_name,engine",
      "counter vllm:num_preemptions_total model_name,engine",
      "counter vllm:prompt_tokens_total model_name,engine",
      "counter vllm:generation_tokens_total model_name,engine",
      "counter vllm:request_success_total model_name,engine,finished_reason",
      "histogram vllm:time_to_first_token_seconds model_name,engine",
      "histogram vllm:inter_token_latency_seconds model_name,engine",
      "histogram vllm:request_time_per_output_token_seconds model_name,engine",
      "histogram vllm:e2e_request_latency_seconds model_name,engine",
      "histogram vllm:request_queue_time_seconds model_name,engine",
      "histogram vllm:request_prefill_time_seconds model_name,engine",
      "histogram vllm:request_decode_time_seconds model_name,engine",
      "histogram vllm:request_inference_time_seconds model_name,engine",
      "gauge vllm:cache_config_info block_size,gpu_memory_utilization,cache_dtype,enable_prefix_caching,prefix_caching_hash_algo,num_gpu_blocks,num_cpu_blocks,engine",
      "gauge zml_sim_instance_info instance_id",
    ]);
  });

  it("keep a registry per node", async () => {
    const a = createSimMetrics("vllm", "a", "node-a");
    const b = createSimMetrics("vllm", "b", "node-b");
    a.requestStarted(7, 0);
    const textA = parsePrometheusText(await a.render(GAUGES)).series;
    const textB = parsePrometheusText(await b.render(GAUGES)).series;
    expect(textA.get("vllm:prompt_tokens_total")).toMatchObject([
      { labels: { model_name: "a" }, value: 7 },
    ]);
    expect(textB.get("vllm:prompt_tokens_total")).toMatchObject([
      { labels: { model_name: "b" }, value: 0 },
    ]);
    expect(textB.get("zml_sim_instance_info")?.[0]?.labels).toEqual({ instance_id: "node-b" });
  });
});
