// The Prometheus metrics of a node with an engine model, named, typed, labelled and bucketed
// as vLLM's V1 engine exposes them (vllm/v1/metrics/loggers.py): every series carries
// `model_name` and `engine`; counters end in `_total`; `cache_config_info` is a gauge at 1
// whose labels carry the cache's configuration.
import { createHistogram } from "../histogram.ts";
import type { Histogram } from "../histogram.ts";
import { escapeLabel, instanceInfoLine, pyFloat } from "../metrics.ts";
import type { SimMetrics } from "../metrics.ts";
import type { EngineObserver, EngineSettings } from "./engine.ts";
import { BLOCK_TOKENS } from "./prompt-blocks.ts";

const TTFT_BOUNDS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0, 160.0, 640.0, 2560.0,
];
const TOKEN_LATENCY_BOUNDS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0,
];
const REQUEST_LATENCY_BOUNDS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
  480.0, 960.0, 1920.0, 7680.0,
];

export interface EngineMetricsSources {
  modelName: string;
  instanceId: string;
  settings: Readonly<EngineSettings>;
}

/**
 * The metrics of an engine node: the engine reports its phases (as {@link EngineObserver}),
 * the writers report answers sent in full (as {@link SimMetrics}); gauges and counters come
 * from the engine's counters handed to each render.
 */
export function createEngineMetrics(sources: EngineMetricsSources): SimMetrics & EngineObserver {
  const model = escapeLabel(sources.modelName);
  const labels = `model_name="${model}",engine="0"`;
  const success = { stop: 0, length: 0 };
  const histograms = {
    ttft: createHistogram(TTFT_BOUNDS),
    interToken: createHistogram(TOKEN_LATENCY_BOUNDS),
    requestTimePerToken: createHistogram(TOKEN_LATENCY_BOUNDS),
    e2e: createHistogram(REQUEST_LATENCY_BOUNDS),
    queue: createHistogram(REQUEST_LATENCY_BOUNDS),
    prefill: createHistogram(REQUEST_LATENCY_BOUNDS),
    decode: createHistogram(REQUEST_LATENCY_BOUNDS),
    inference: createHistogram(REQUEST_LATENCY_BOUNDS),
  };
  const { settings } = sources;
  const cacheConfigLabels = [
    `block_size="${BLOCK_TOKENS}"`,
    `gpu_memory_utilization="0.9"`,
    `cache_dtype="auto"`,
    `enable_prefix_caching="True"`,
    `prefix_caching_hash_algo="sha256"`,
    `num_gpu_blocks="${settings.kvCacheBlocks}"`,
    `num_cpu_blocks="None"`,
    `engine="0"`,
  ].join(",");

  function family(name: string, type: string, help: string, value: number): string {
    return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}{${labels}} ${pyFloat(value)}\n`;
  }

  function histogram(name: string, help: string, h: Histogram): string {
    let text = `# HELP ${name} ${help}\n# TYPE ${name} histogram\n`;
    const cumulative = h.cumulative();
    for (let i = 0; i < h.bounds.length; i++) {
      const le = pyFloat(h.bounds[i] ?? 0);
      text += `${name}_bucket{${labels},le="${le}"} ${pyFloat(cumulative[i] ?? 0)}\n`;
    }
    text += `${name}_bucket{${labels},le="+Inf"} ${pyFloat(h.count)}\n`;
    text += `${name}_count{${labels}} ${pyFloat(h.count)}\n`;
    text += `${name}_sum{${labels}} ${pyFloat(h.sum)}\n`;
    return text;
  }

  return {
    // The engine observes scheduling, tokens and timings itself (below).
    requestQueued() {},
    requestStarted() {},
    firstToken() {},
    tokensGenerated() {},
    requestSucceeded(reason, _generated, e2eS) {
      success[reason] += 1;
      histograms.e2e.observe(e2eS);
    },
    scheduled({ queueS }) {
      histograms.queue.observe(queueS);
    },
    prefilled({ ttftS, prefillS }) {
      histograms.ttft.observe(ttftS);
      histograms.prefill.observe(prefillS);
    },
    stepped({ stepS, sequences }) {
      histograms.interToken.observe(stepS, sequences);
    },
    finished({ decodeS, inferenceS, generated }) {
      histograms.decode.observe(decodeS);
      histograms.inference.observe(inferenceS);
      if (generated > 1) histograms.requestTimePerToken.observe(decodeS / (generated - 1));
    },
    render(gauges) {
      const c = gauges.engine;
      if (c === undefined) throw new Error("engine metrics rendered without the engine's counters");
      const successName = "vllm:request_success_total";
      return (
        family(
          "vllm:num_requests_running",
          "gauge",
          "Number of requests in model execution batches.",
          c.running,
        ) +
        family(
          "vllm:num_requests_waiting",
          "gauge",
          "Number of requests waiting to be processed.",
          c.waiting,
        ) +
        family(
          "vllm:gpu_cache_usage_perc",
          "gauge",
          "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
          c.kvCacheUsage,
        ) +
        family(
          "vllm:kv_cache_usage_perc",
          "gauge",
          "KV-cache usage. 1 means 100 percent usage.",
          c.kvCacheUsage,
        ) +
        family(
          "vllm:prefix_cache_queries_total",
          "counter",
          "Prefix cache queries, in terms of number of queried tokens.",
          c.prefixCacheQueries,
        ) +
        family(
          "vllm:prefix_cache_hits_total",
          "counter",
          "Prefix cache hits, in terms of number of cached tokens.",
          c.prefixCacheHits,
        ) +
        family(
          "vllm:num_preemptions_total",
          "counter",
          "Cumulative number of preemption from the engine.",
          0,
        ) +
        family(
          "vllm:prompt_tokens_total",
          "counter",
          "Number of prefill tokens processed.",
          c.promptTokens,
        ) +
        family(
          "vllm:generation_tokens_total",
          "counter",
          "Number of generation tokens processed.",
          c.generationTokens,
        ) +
        `# HELP ${successName} Count of successfully processed requests.\n` +
        `# TYPE ${successName} counter\n` +
        `${successName}{${labels},finished_reason="stop"} ${pyFloat(success.stop)}\n` +
        `${successName}{${labels},finished_reason="length"} ${pyFloat(success.length)}\n` +
        histogram(
          "vllm:time_to_first_token_seconds",
          "Histogram of time to first token in seconds.",
          histograms.ttft,
        ) +
        histogram(
          "vllm:inter_token_latency_seconds",
          "Histogram of inter-token latency in seconds.",
          histograms.interToken,
        ) +
        histogram(
          "vllm:request_time_per_output_token_seconds",
          "Histogram of time_per_output_token_seconds per request.",
          histograms.requestTimePerToken,
        ) +
        histogram(
          "vllm:e2e_request_latency_seconds",
          "Histogram of e2e request latency in seconds.",
          histograms.e2e,
        ) +
        histogram(
          "vllm:request_queue_time_seconds",
          "Histogram of time spent in WAITING phase for request.",
          histograms.queue,
        ) +
        histogram(
          "vllm:request_prefill_time_seconds",
          "Histogram of time spent in PREFILL phase for request.",
          histograms.prefill,
        ) +
        histogram(
          "vllm:request_decode_time_seconds",
          "Histogram of time spent in DECODE phase for request.",
          histograms.decode,
        ) +
        histogram(
          "vllm:request_inference_time_seconds",
          "Histogram of time spent in RUNNING phase for request.",
          histograms.inference,
        ) +
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n" +
        "# TYPE vllm:cache_config_info gauge\n" +
        `vllm:cache_config_info{${cacheConfigLabels}} 1.0\n` +
        instanceInfoLine(sources.instanceId)
      );
    },
  };
}
