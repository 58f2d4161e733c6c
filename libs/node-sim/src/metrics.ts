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
  if (flavour === "llamacpp") return createLlamacppMetrics(instanceLine);
  return flavour === "vllm"
    ? createVllmMetrics(escapeLabel(modelName), instanceLine)
    : createTgiMetrics(instanceLine);
}

/**
 * A C++ `std::ostream` double in its default format (`%g` with 6 significant digits), which
 * llama-server writes its metrics with: `40`, `0.018902`, `8041.48`, `1.23457e+06`.
 */
export function cppDouble(value: number): string {
  if (!Number.isFinite(value)) return value > 0 ? "inf" : value < 0 ? "-inf" : "nan";
  if (value === 0) return "0";
  const rounded = Number(value.toPrecision(6));
  const exp = Math.floor(Math.log10(Math.abs(rounded)));
  if (exp < -4 || exp >= 6) {
    const [mantissa = "0", power = "0"] = rounded.toExponential(5).split("e");
    const trimmed = mantissa.includes(".") ? mantissa.replace(/\.?0+$/, "") : mantissa;
    const p = Number(power);
    return `${trimmed}e${p < 0 ? "-" : "+"}${String(Math.abs(p)).padStart(2, "0")}`;
  }
  return String(rounded);
}

/**
 * llama.cpp's `llama-server --metrics` (tools/server/server-task.cpp, `to_metrics`): counters
 * then gauges, each with HELP and TYPE, no labels. The simulator has no prompt cache, so
 * `prompt_tokens_cached_total` stays 0; it counts a request's time to first token as its
 * prompt time, one decode call per generated token, and reports the busy slots of the moment
 * as `n_busy_slots_per_decode` (the server's own is an average since start).
 */
function createLlamacppMetrics(instanceLine: string): SimMetrics {
  let promptTokens = 0;
  let promptSeconds = 0;
  let predicted = 0;
  let predictedSeconds = 0;
  let maxTokens = 0;
  let lastPrompt = 0;
  let decodes = 0;

  const item = (type: string, name: string, help: string, value: number) =>
    `# HELP llamacpp:${name} ${help}\n# TYPE llamacpp:${name} ${type}\n` +
    `llamacpp:${name} ${cppDouble(value)}\n`;

  return {
    requestQueued() {},
    requestStarted(prompt) {
      promptTokens += prompt;
      lastPrompt = prompt;
    },
    firstToken(ttftS) {
      promptSeconds += ttftS;
    },
    tokensGenerated(count) {
      predicted += count;
      decodes += count;
    },
    requestSucceeded(_reason, generated, _e2eS, decodeS) {
      predictedSeconds += decodeS;
      maxTokens = Math.max(maxTokens, lastPrompt + generated);
    },
    render(g) {
      const rate = (tokens: number, seconds: number) => (seconds > 0 ? tokens / seconds : 0);
      return (
        item(
          "counter",
          "prompt_tokens_total",
          "Number of prompt tokens processed, excluding cached tokens",
          promptTokens,
        ) +
        item(
          "counter",
          "prompt_tokens_cached_total",
          "Number of prompt tokens reused from the cache",
          0,
        ) +
        item(
          "counter",
          "prompt_seconds_total",
          "Total time spent processing prompts",
          promptSeconds,
        ) +
        item(
          "counter",
          "tokens_predicted_total",
          "Number of generation tokens processed",
          predicted,
        ) +
        item(
          "counter",
          "tokens_predicted_seconds_total",
          "Total time spent generating tokens",
          predictedSeconds,
        ) +
        item(
          "counter",
          "n_decode_total",
          "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
          decodes,
        ) +
        item(
          "counter",
          "n_tokens_max",
          "Largest observed sequence length (prompt + generation)",
          maxTokens,
        ) +
        item(
          "gauge",
          "prompt_tokens_seconds",
          "Average prompt throughput in tokens/s",
          rate(promptTokens, promptSeconds),
        ) +
        item(
          "gauge",
          "predicted_tokens_seconds",
          "Average generation throughput in tokens/s",
          rate(predicted, predictedSeconds),
        ) +
        item("gauge", "requests_processing", "Number of requests processing", g.running) +
        item("gauge", "requests_deferred", "Number of requests deferred", g.waiting) +
        item(
          "gauge",
          "n_busy_slots_per_decode",
          "Average number of busy slots per llama_decode() call",
          g.running > 0 ? g.running : 1,
        ) +
        instanceLine
      );
    },
  };
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
