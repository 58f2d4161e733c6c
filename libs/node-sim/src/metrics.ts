import { createHistogram, exponentialBounds, linearBounds } from "./histogram.ts";
import type { Histogram } from "./histogram.ts";
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

/** The node's Prometheus metrics: events in, text exposition out. */
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
  render(gauges: MetricsGauges): string;
}

export function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** Python's float repr, which vLLM's prometheus_client uses: integers keep a `.0`. */
export function pyFloat(value: number): string {
  if (value === Infinity) return "+Inf";
  return Number.isInteger(value) && Math.abs(value) < 1e16 ? `${value}.0` : String(value);
}

/** Rust's float display, which TGI's metrics exporter uses: integers without a fraction. */
function rustFloat(value: number): string {
  return value === Infinity ? "+Inf" : String(value);
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

/** `zml_sim_instance_info`, which every flavour ends its exposition with. */
export function instanceInfoLine(instanceId: string): string {
  return (
    "# HELP zml_sim_instance_info Identity of this simulated node process.\n" +
    "# TYPE zml_sim_instance_info gauge\n" +
    `zml_sim_instance_info{instance_id="${escapeLabel(instanceId)}"} 1\n`
  );
}

export function createSimMetrics(
  flavour: SimFlavour,
  modelName: string,
  instanceId: string,
): SimMetrics {
  const instanceLine = instanceInfoLine(instanceId);
  return flavour === "vllm"
    ? createVllmMetrics(escapeLabel(modelName), instanceLine)
    : createTgiMetrics(instanceLine);
}

function createVllmMetrics(model: string, instanceLine: string): SimMetrics {
  const labels = `{model_name="${model}"}`;
  let promptTokens = 0;
  let generationTokens = 0;
  const success = { stop: 0, length: 0 };
  const ttft = createHistogram(VLLM_TTFT_BOUNDS);
  const e2e = createHistogram(VLLM_E2E_BOUNDS);
  const timePerToken = createHistogram(VLLM_TPOT_BOUNDS);

  function family(name: string, type: string, help: string, value: number): string {
    return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${labels} ${pyFloat(value)}\n`;
  }

  function histogram(name: string, help: string, h: Histogram): string {
    let text = `# HELP ${name} ${help}\n# TYPE ${name} histogram\n`;
    const cumulative = h.cumulative();
    for (let i = 0; i < h.bounds.length; i++) {
      const le = pyFloat(h.bounds[i] ?? 0);
      text += `${name}_bucket{model_name="${model}",le="${le}"} ${pyFloat(cumulative[i] ?? 0)}\n`;
    }
    text += `${name}_bucket{model_name="${model}",le="+Inf"} ${pyFloat(h.count)}\n`;
    text += `${name}_count${labels} ${pyFloat(h.count)}\n`;
    text += `${name}_sum${labels} ${pyFloat(h.sum)}\n`;
    return text;
  }

  return {
    requestQueued() {},
    requestStarted(prompt) {
      promptTokens += prompt;
    },
    firstToken(seconds) {
      ttft.observe(seconds);
    },
    tokensGenerated(count) {
      generationTokens += count;
    },
    requestSucceeded(reason, generated, e2eS, decodeS) {
      success[reason] += 1;
      e2e.observe(e2eS);
      // vLLM observes each gap between two output tokens of a request.
      if (generated > 1) timePerToken.observe(decodeS / (generated - 1), generated - 1);
    },
    render(g) {
      // A simulated KV cache fills with the share of slots in use.
      const cache = Math.min(1, g.running / g.maxConcurrency);
      const successName = "vllm:request_success_total";
      return (
        family(
          "vllm:num_requests_running",
          "gauge",
          "Number of requests currently running on GPU.",
          g.running,
        ) +
        family(
          "vllm:num_requests_waiting",
          "gauge",
          "Number of requests waiting to be processed.",
          g.waiting,
        ) +
        family(
          "vllm:gpu_cache_usage_perc",
          "gauge",
          "GPU KV-cache usage. 1 means 100 percent usage.",
          cache,
        ) +
        family(
          "vllm:kv_cache_usage_perc",
          "gauge",
          "KV-cache usage. 1 means 100 percent usage.",
          cache,
        ) +
        family(
          "vllm:prompt_tokens_total",
          "counter",
          "Number of prefill tokens processed.",
          promptTokens,
        ) +
        family(
          "vllm:generation_tokens_total",
          "counter",
          "Number of generation tokens processed.",
          generationTokens,
        ) +
        `# HELP ${successName} Count of successfully processed requests.\n` +
        `# TYPE ${successName} counter\n` +
        `${successName}{model_name="${model}",finished_reason="stop"} ${pyFloat(success.stop)}\n` +
        `${successName}{model_name="${model}",finished_reason="length"} ${pyFloat(success.length)}\n` +
        histogram(
          "vllm:time_to_first_token_seconds",
          "Histogram of time to first token in seconds.",
          ttft,
        ) +
        histogram(
          "vllm:time_per_output_token_seconds",
          "Histogram of time per output token in seconds.",
          timePerToken,
        ) +
        histogram(
          "vllm:e2e_request_latency_seconds",
          "Histogram of end to end request latency in seconds.",
          e2e,
        ) +
        instanceLine
      );
    },
  };
}

function createTgiMetrics(instanceLine: string): SimMetrics {
  let requestCount = 0;
  let requestSuccess = 0;
  const inputLength = createHistogram(TGI_INPUT_BOUNDS);
  const generatedTokens = createHistogram(TGI_TOKEN_BOUNDS);
  const queueDuration = createHistogram(TGI_DURATION_BOUNDS);
  const timePerToken = createHistogram(TGI_DURATION_BOUNDS);
  const duration = createHistogram(TGI_DURATION_BOUNDS);

  // TGI's exporter separates families with a blank line and omits the `_total` suffix.
  function family(name: string, type: string, help: string, value: number): string {
    return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${rustFloat(value)}\n\n`;
  }

  function histogram(name: string, help: string, h: Histogram): string {
    let text = `# HELP ${name} ${help}\n# TYPE ${name} histogram\n`;
    const cumulative = h.cumulative();
    for (let i = 0; i < h.bounds.length; i++) {
      text += `${name}_bucket{le="${rustFloat(h.bounds[i] ?? 0)}"} ${cumulative[i] ?? 0}\n`;
    }
    text += `${name}_bucket{le="+Inf"} ${h.count}\n`;
    text += `${name}_sum ${rustFloat(h.sum)}\n${name}_count ${h.count}\n\n`;
    return text;
  }

  return {
    requestQueued() {
      requestCount += 1;
    },
    requestStarted(prompt, queueS) {
      inputLength.observe(prompt);
      queueDuration.observe(queueS);
    },
    firstToken() {},
    tokensGenerated() {},
    requestSucceeded(_reason, generated, e2eS, decodeS) {
      requestSuccess += 1;
      generatedTokens.observe(generated);
      timePerToken.observe(decodeS / generated);
      duration.observe(e2eS);
    },
    render(g) {
      return (
        family("tgi_request_success", "counter", "Number of successful requests", requestSuccess) +
        family("tgi_request_count", "counter", "Total number of requests", requestCount) +
        family("tgi_queue_size", "gauge", "Current queue size", g.waiting) +
        family(
          "tgi_batch_current_max_tokens",
          "gauge",
          "Maximum tokens for the current batch",
          g.batchTokens,
        ) +
        family("tgi_batch_current_size", "gauge", "Current batch size", g.running) +
        histogram("tgi_request_input_length", "Input token length per request", inputLength) +
        histogram("tgi_request_generated_tokens", "Generated tokens per request", generatedTokens) +
        histogram(
          "tgi_request_queue_duration",
          "Time spent in the queue per request",
          queueDuration,
        ) +
        histogram(
          "tgi_request_mean_time_per_token_duration",
          "Mean time per token per request (inter-token latency)",
          timePerToken,
        ) +
        histogram(
          "tgi_request_duration",
          "Total time spent processing the request (e2e latency)",
          duration,
        ) +
        instanceLine
      );
    },
  };
}
