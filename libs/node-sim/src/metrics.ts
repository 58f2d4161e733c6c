import { Counter, Registry } from "prom-client";
import type { Gauge } from "prom-client";
import { exponentialBounds, linearBounds } from "./histogram.ts";
import { labelledMetrics, observeTimes, registerInstanceInfo } from "./prom-metrics.ts";
import type { LabelledMetrics } from "./prom-metrics.ts";
import type { EngineCounters } from "./engine/engine.ts";
import type { SimFlavour } from "./types.ts";

/** Point-in-time values the server reads from its scheduler when metrics are scraped. */
export interface MetricsGauges {
  running: number;
  waiting: number;
  maxConcurrency: number;
  /** Prompt plus generation budget of the running requests (TGI's batch max tokens). */
  batchTokens: number;
  /** The engine's counters, on a node with an engine model. */
  engine?: EngineCounters;
}

/**
 * The node's Prometheus metrics: events in, text exposition out. Each node has a registry of
 * its own (several simulated nodes share a process), rendered by prom-client.
 */
export interface SimMetrics {
  /** A valid request joined the queue. */
  requestQueued(): void;
  /** A request got a generation slot after `queueS` seconds in the queue. */
  requestStarted(promptTokens: number, queueS: number): void;
  firstToken(ttftS: number): void;
  tokensGenerated(count: number): void;
  /** A request was answered in full. */
  requestSucceeded(
    finishReason: "stop" | "length",
    generated: number,
    e2eS: number,
    decodeS: number,
  ): void;
  render(gauges: MetricsGauges): Promise<string>;
}

// Bucket bounds as real vLLM (0.6-era, which also has gpu_cache_usage_perc) sets them.
const VLLM_TTFT_BOUNDS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
// As in the real vLLM v0 capture of libs/health's tests.
const VLLM_TPOT_BOUNDS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0,
];
const VLLM_E2E_BOUNDS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];

// TGI: durations grow by 1.5 from 0.1 ms; token counts use 100 even steps up to the limits
// of a default launch (max input 4095, max total 4096 tokens).
const TGI_DURATION_BOUNDS = exponentialBounds(0.0001, 1.5, 35);
const TGI_INPUT_BOUNDS = linearBounds(4095, 100);
const TGI_TOKEN_BOUNDS = linearBounds(4096, 100);

export function createSimMetrics(
  flavour: SimFlavour,
  modelName: string,
  instanceId: string,
): SimMetrics {
  const registry = new Registry();
  if (flavour === "llamacpp") return createLlamacppMetrics(registry, instanceId);
  return flavour === "vllm"
    ? createVllmMetrics(registry, modelName, instanceId)
    : createTgiMetrics(registry, instanceId);
}

/**
 * llama.cpp's `llama-server --metrics` (tools/server/server-task.cpp, `to_metrics`): counters
 * then gauges, no labels. The simulator has no prompt cache, so `prompt_tokens_cached_total`
 * stays 0; it counts a request's time to first token as its prompt time, one decode call per
 * generated token, and reports the busy slots of the moment as `n_busy_slots_per_decode` (the
 * server's own is an average since start).
 */
function createLlamacppMetrics(registry: Registry, instanceId: string): SimMetrics {
  const make = labelledMetrics(registry, {});
  const counter = (name: string, help: string) => make.counter(`llamacpp:${name}`, help);
  const gauge = (name: string, help: string) => make.gauge(`llamacpp:${name}`, help);
  const promptTokens = counter(
    "prompt_tokens_total",
    "Number of prompt tokens processed, excluding cached tokens",
  );
  counter("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache");
  const promptSeconds = counter("prompt_seconds_total", "Total time spent processing prompts");
  const predicted = counter("tokens_predicted_total", "Number of generation tokens processed");
  const predictedSeconds = counter(
    "tokens_predicted_seconds_total",
    "Total time spent generating tokens",
  );
  const decodes = counter(
    "n_decode_total",
    "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
  );
  const tokensMax = counter(
    "n_tokens_max",
    "Largest observed sequence length (prompt + generation)",
  );
  const promptRate = gauge("prompt_tokens_seconds", "Average prompt throughput in tokens/s");
  const predictedRate = gauge(
    "predicted_tokens_seconds",
    "Average generation throughput in tokens/s",
  );
  const processing = gauge("requests_processing", "Number of requests processing");
  const deferred = gauge("requests_deferred", "Number of requests deferred");
  const busySlots = gauge(
    "n_busy_slots_per_decode",
    "Average number of busy slots per llama_decode() call",
  );
  registerInstanceInfo(registry, instanceId);

  // What the two throughput gauges are computed from at each scrape.
  let prompt = 0;
  let promptS = 0;
  let generated = 0;
  let generatedS = 0;
  let maxTokens = 0;
  let lastPrompt = 0;

  return {
    requestQueued() {},
    requestStarted(tokens) {
      promptTokens.inc(tokens);
      prompt += tokens;
      lastPrompt = tokens;
    },
    firstToken(ttftS) {
      promptSeconds.inc(ttftS);
      promptS += ttftS;
    },
    tokensGenerated(count) {
      predicted.inc(count);
      decodes.inc(count);
      generated += count;
    },
    requestSucceeded(_reason, tokens, _e2eS, decodeS) {
      predictedSeconds.inc(decodeS);
      generatedS += decodeS;
      // A counter that only grows to the longest sequence seen, as llama-server's does.
      const length = lastPrompt + tokens;
      if (length > maxTokens) {
        tokensMax.inc(length - maxTokens);
        maxTokens = length;
      }
    },
    render(g) {
      const rate = (tokens: number, seconds: number) => (seconds > 0 ? tokens / seconds : 0);
      promptRate.set(rate(prompt, promptS));
      predictedRate.set(rate(generated, generatedS));
      processing.set(g.running);
      deferred.set(g.waiting);
      busySlots.set(g.running > 0 ? g.running : 1);
      return registry.metrics();
    },
  };
}

/**
 * vLLM's four load gauges: requests running and waiting, and KV-cache usage under its old and
 * new names. The help texts of running and the old cache name differ between vLLM releases.
 */
export function vllmLoadGauges<L extends string>(
  gauge: LabelledMetrics<L>["gauge"],
  help: { running: string; gpuCache: string },
): Record<"running" | "waiting" | "gpuCache" | "kvCache", Gauge<L>> {
  return {
    running: gauge("vllm:num_requests_running", help.running),
    waiting: gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    gpuCache: gauge("vllm:gpu_cache_usage_perc", help.gpuCache),
    kvCache: gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
  };
}

function createVllmMetrics(registry: Registry, model: string, instanceId: string): SimMetrics {
  const labels = { model_name: model };
  const { gauge, counter, histogram } = labelledMetrics(registry, labels);
  const { running, waiting, gpuCache, kvCache } = vllmLoadGauges(gauge, {
    running: "Number of requests currently running on GPU.",
    gpuCache: "GPU KV-cache usage. 1 means 100 percent usage.",
  });
  const promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.");
  const generationTokens = counter(
    "vllm:generation_tokens_total",
    "Number of generation tokens processed.",
  );
  const success = new Counter({
    name: "vllm:request_success_total",
    help: "Count of successfully processed requests.",
    labelNames: ["model_name", "finished_reason"],
    registers: [registry],
  });
  for (const reason of ["stop", "length"]) success.inc({ ...labels, finished_reason: reason }, 0);
  const ttft = histogram(
    "vllm:time_to_first_token_seconds",
    "Histogram of time to first token in seconds.",
    VLLM_TTFT_BOUNDS,
  );
  const timePerToken = histogram(
    "vllm:time_per_output_token_seconds",
    "Histogram of time per output token in seconds.",
    VLLM_TPOT_BOUNDS,
  );
  const e2e = histogram(
    "vllm:e2e_request_latency_seconds",
    "Histogram of end to end request latency in seconds.",
    VLLM_E2E_BOUNDS,
  );
  registerInstanceInfo(registry, instanceId);

  return {
    requestQueued() {},
    requestStarted(prompt) {
      promptTokens.inc(labels, prompt);
    },
    firstToken(seconds) {
      ttft.observe(labels, seconds);
    },
    tokensGenerated(count) {
      generationTokens.inc(labels, count);
    },
    requestSucceeded(reason, generated, e2eS, decodeS) {
      success.inc({ ...labels, finished_reason: reason });
      e2e.observe(labels, e2eS);
      // vLLM observes each gap between two output tokens of a request.
      if (generated > 1)
        observeTimes(timePerToken, labels, decodeS / (generated - 1), generated - 1);
    },
    render(g) {
      // A simulated KV cache fills with the share of slots in use.
      const cache = Math.min(1, g.running / g.maxConcurrency);
      running.set(labels, g.running);
      waiting.set(labels, g.waiting);
      gpuCache.set(labels, cache);
      kvCache.set(labels, cache);
      return registry.metrics();
    },
  };
}

/** TGI's metrics, which its exporter names without the `_total` suffix on counters. */
function createTgiMetrics(registry: Registry, instanceId: string): SimMetrics {
  const { counter, gauge, histogram } = labelledMetrics(registry, {});
  const requestSuccess = counter("tgi_request_success", "Number of successful requests");
  const requestCount = counter("tgi_request_count", "Total number of requests");
  const queueSize = gauge("tgi_queue_size", "Current queue size");
  const batchMaxTokens = gauge(
    "tgi_batch_current_max_tokens",
    "Maximum tokens for the current batch",
  );
  const batchSize = gauge("tgi_batch_current_size", "Current batch size");
  const inputLength = histogram(
    "tgi_request_input_length",
    "Input token length per request",
    TGI_INPUT_BOUNDS,
  );
  const generatedTokens = histogram(
    "tgi_request_generated_tokens",
    "Generated tokens per request",
    TGI_TOKEN_BOUNDS,
  );
  const queueDuration = histogram(
    "tgi_request_queue_duration",
    "Time spent in the queue per request",
    TGI_DURATION_BOUNDS,
  );
  const timePerToken = histogram(
    "tgi_request_mean_time_per_token_duration",
    "Mean time per token per request (inter-token latency)",
    TGI_DURATION_BOUNDS,
  );
  const duration = histogram(
    "tgi_request_duration",
    "Total time spent processing the request (e2e latency)",
    TGI_DURATION_BOUNDS,
  );
  registerInstanceInfo(registry, instanceId);

  return {
    requestQueued() {
      requestCount.inc();
    },
    requestStarted(prompt, queueS) {
      inputLength.observe(prompt);
      queueDuration.observe(queueS);
    },
    firstToken() {},
    tokensGenerated() {},
    requestSucceeded(_reason, generated, e2eS, decodeS) {
      requestSuccess.inc();
      generatedTokens.observe(generated);
      timePerToken.observe(decodeS / generated);
      duration.observe(e2eS);
    },
    render(g) {
      queueSize.set(g.waiting);
      batchMaxTokens.set(g.batchTokens);
      batchSize.set(g.running);
      return registry.metrics();
    },
  };
}
