// The Prometheus metrics of a node with an engine model, named, typed, labelled and bucketed
// as vLLM's V1 engine exposes them (vllm/v1/metrics/loggers.py): every series carries
// `model_name` and `engine`; counters end in `_total`; `cache_config_info` is a gauge at 1
// whose labels carry the cache's configuration.
import { Counter, Gauge, Registry } from "prom-client";
import { vllmLoadGauges } from "../metrics.ts";
import { labelledMetrics, observeTimes, registerInstanceInfo } from "../prom-metrics.ts";
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
  const registry = new Registry();
  const registers = [registry];
  const labels = { model_name: sources.modelName, engine: "0" };
  const { gauge, counter, histogram } = labelledMetrics(registry, labels);

  const { running, waiting, gpuCache, kvCache } = vllmLoadGauges(gauge, {
    running: "Number of requests in model execution batches.",
    gpuCache:
      "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
  });
  // The engine keeps these totals itself; each scrape shows them.
  const totals = {
    prefixCacheQueries: counter(
      "vllm:prefix_cache_queries_total",
      "Prefix cache queries, in terms of number of queried tokens.",
    ),
    prefixCacheHits: counter(
      "vllm:prefix_cache_hits_total",
      "Prefix cache hits, in terms of number of cached tokens.",
    ),
    preemptions: counter(
      "vllm:num_preemptions_total",
      "Cumulative number of preemption from the engine.",
    ),
    promptTokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
    generationTokens: counter(
      "vllm:generation_tokens_total",
      "Number of generation tokens processed.",
    ),
  };
  const success = new Counter({
    name: "vllm:request_success_total",
    help: "Count of successfully processed requests.",
    labelNames: ["model_name", "engine", "finished_reason"],
    registers,
  });
  for (const reason of ["stop", "length"]) success.inc({ ...labels, finished_reason: reason }, 0);
  const histograms = {
    ttft: histogram(
      "vllm:time_to_first_token_seconds",
      "Histogram of time to first token in seconds.",
      TTFT_BOUNDS,
    ),
    interToken: histogram(
      "vllm:inter_token_latency_seconds",
      "Histogram of inter-token latency in seconds.",
      TOKEN_LATENCY_BOUNDS,
    ),
    requestTimePerToken: histogram(
      "vllm:request_time_per_output_token_seconds",
      "Histogram of time_per_output_token_seconds per request.",
      TOKEN_LATENCY_BOUNDS,
    ),
    e2e: histogram(
      "vllm:e2e_request_latency_seconds",
      "Histogram of e2e request latency in seconds.",
      REQUEST_LATENCY_BOUNDS,
    ),
    queue: histogram(
      "vllm:request_queue_time_seconds",
      "Histogram of time spent in WAITING phase for request.",
      REQUEST_LATENCY_BOUNDS,
    ),
    prefill: histogram(
      "vllm:request_prefill_time_seconds",
      "Histogram of time spent in PREFILL phase for request.",
      REQUEST_LATENCY_BOUNDS,
    ),
    decode: histogram(
      "vllm:request_decode_time_seconds",
      "Histogram of time spent in DECODE phase for request.",
      REQUEST_LATENCY_BOUNDS,
    ),
    inference: histogram(
      "vllm:request_inference_time_seconds",
      "Histogram of time spent in RUNNING phase for request.",
      REQUEST_LATENCY_BOUNDS,
    ),
  };
  new Gauge({
    name: "vllm:cache_config_info",
    help: "Information of the LLMEngine CacheConfig",
    labelNames: [
      "block_size",
      "gpu_memory_utilization",
      "cache_dtype",
      "enable_prefix_caching",
      "prefix_caching_hash_algo",
      "num_gpu_blocks",
      "num_cpu_blocks",
      "engine",
    ],
    registers,
  }).set(
    {
      block_size: String(BLOCK_TOKENS),
      gpu_memory_utilization: "0.9",
      cache_dtype: "auto",
      enable_prefix_caching: "True",
      prefix_caching_hash_algo: "sha256",
      num_gpu_blocks: String(sources.settings.kvCacheBlocks),
      num_cpu_blocks: "None",
      engine: "0",
    },
    1,
  );
  registerInstanceInfo(registry, sources.instanceId);

  /** Shows the engine's own total, which the engine keeps (a reset of its cache zeroes some). */
  function mirror(counter: Counter<string>, total: number): void {
    counter.reset();
    counter.inc(labels, total);
  }

  return {
    // The engine observes scheduling, tokens and timings itself (below).
    requestQueued() {},
    requestStarted() {},
    firstToken() {},
    tokensGenerated() {},
    requestSucceeded(reason, _generated, e2eS) {
      success.inc({ ...labels, finished_reason: reason });
      histograms.e2e.observe(labels, e2eS);
    },
    scheduled({ queueS }) {
      histograms.queue.observe(labels, queueS);
    },
    prefilled({ ttftS, prefillS }) {
      histograms.ttft.observe(labels, ttftS);
      histograms.prefill.observe(labels, prefillS);
    },
    stepped({ stepS, sequences }) {
      observeTimes(histograms.interToken, labels, stepS, sequences);
    },
    finished({ decodeS, inferenceS, generated }) {
      histograms.decode.observe(labels, decodeS);
      histograms.inference.observe(labels, inferenceS);
      if (generated > 1) histograms.requestTimePerToken.observe(labels, decodeS / (generated - 1));
    },
    render(gauges) {
      const c = gauges.engine;
      if (c === undefined) {
        return Promise.reject(new Error("engine metrics rendered without the engine's counters"));
      }
      running.set(labels, c.running);
      waiting.set(labels, c.waiting);
      gpuCache.set(labels, c.kvCacheUsage);
      kvCache.set(labels, c.kvCacheUsage);
      mirror(totals.prefixCacheQueries, c.prefixCacheQueries);
      mirror(totals.prefixCacheHits, c.prefixCacheHits);
      mirror(totals.promptTokens, c.promptTokens);
      mirror(totals.generationTokens, c.generationTokens);
      return registry.metrics();
    },
  };
}
