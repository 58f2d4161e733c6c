// The reference makes the package's local declaration travel with this module: services that
// import @zml/health type-check this file inside their own program, which would otherwise not
// include the declaration and would reject the untyped import.
// eslint-disable-next-line @typescript-eslint/triple-slash-reference
/// <reference path="./parse-prometheus-text-format.d.ts" />
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import type { PrometheusFamily, PrometheusSample } from "parse-prometheus-text-format";
import { MetricsReadError } from "./errors.ts";

/** Serving frameworks whose Prometheus metrics {@link readMetrics} understands. */
export type MetricsFramework = "vllm" | "tgi";

/** What one probe learned about a node's load and identity. */
export interface MetricsReading {
  /** Requests being executed, summed over every model and engine on the node. */
  readonly running: number;
  /** Requests queued and not yet running. */
  readonly waiting: number;
  /** `running + waiting`. */
  readonly queueDepth: number;
  /** KV-cache usage 0–1; `null` when the framework does not report it. */
  readonly kvCacheUsage: number | null;
  /** Free accelerator memory in GiB; `null` when not reported. */
  readonly freeMemoryGib: number | null;
  /** Cumulative prompt tokens processed; `null` when not reported. */
  readonly promptTokensTotal: number | null;
  /** Cumulative generated tokens; `null` when not reported. */
  readonly generationTokensTotal: number | null;
  /**
   * The time-per-output-token histogram's cumulative `_sum` (seconds) and `_count`: between
   * two probes, Δsum / Δcount is how long one request waits for each of its tokens, however
   * many requests the node runs. `null` when not reported.
   */
  readonly tokenLatency: TokenLatencyTotals | null;
  /** Identity of the serving process; a change means the node restarted or was replaced. */
  readonly instanceId: string | null;
}

/** Cumulative totals of a time-per-output-token histogram. */
export interface TokenLatencyTotals {
  readonly seconds: number;
  readonly count: number;
}

const VLLM_SERIES = {
  running: "vllm:num_requests_running",
  waiting: "vllm:num_requests_waiting",
  // vLLM 0.10 renamed the gauge and kept the old name as deprecated for a while; prefer the new.
  kvCache: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
  promptTokens: "vllm:prompt_tokens_total",
  generationTokens: "vllm:generation_tokens_total",
  // Newest first: current vLLM has a per-request mean (total time ÷ tokens) and the per-token
  // inter_token_latency, which replaced the deprecated time_per_output_token. Each one's
  // mean is seconds per output token.
  tokenLatency: [
    "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
  ],
} as const;

const TGI_SERIES = {
  running: "tgi_batch_current_size",
  waiting: "tgi_queue_size",
  // TGI has no token counters; the sums of these per-request histograms grow monotonically
  // and serve as counters (they advance when a request finishes).
  promptTokens: "tgi_request_input_length",
  generationTokens: "tgi_request_generated_tokens",
  tokenLatency: ["tgi_request_mean_time_per_token_duration"],
} as const;

/** Our node simulator's identity series; real frameworks do not expose one. */
const INSTANCE_INFO = "zml_sim_instance_info";
/** NVIDIA DCGM exporter: free framebuffer memory in MiB, one sample per GPU. */
const DCGM_FB_FREE_MIB = "DCGM_FI_DEV_FB_FREE";

/**
 * Reads a node's Prometheus `/metrics` text into a {@link MetricsReading}.
 *
 * vLLM: `vllm:num_requests_running` and `vllm:num_requests_waiting` are required; KV-cache
 * usage comes from `vllm:kv_cache_usage_perc` or, on older vLLM, `vllm:gpu_cache_usage_perc`;
 * token totals from `vllm:prompt_tokens_total` / `vllm:generation_tokens_total`. Counts and
 * token totals are summed over every label set (`model_name`, `engine`); KV-cache usage takes
 * the fullest engine, since one full cache is enough to stall admissions there.
 *
 * TGI: `tgi_batch_current_size` (running) and `tgi_queue_size` (waiting) are required; token
 * totals come from the `_sum` of `tgi_request_input_length` and `tgi_request_generated_tokens`.
 * TGI's exporter renders a series only after it is first recorded, and TGI records these
 * gauges only once a request reaches its queue, so a body with no sample lines at all (empty,
 * or comments only) reads as an idle server (zero running, zero waiting) rather than an error.
 *
 * Seconds per output token (`tokenLatency`): vLLM's `vllm:request_time_per_output_token_seconds`,
 * else `vllm:inter_token_latency_seconds`, else `vllm:time_per_output_token_seconds`; TGI's
 * `tgi_request_mean_time_per_token_duration`; the `_sum` and `_count` over every label set.
 *
 * Both: `instanceId` from the `instance_id` label of `zml_sim_instance_info` when present;
 * free memory from DCGM's `DCGM_FI_DEV_FB_FREE` (MiB, summed over GPUs) when present.
 * Running and waiting are rounded to whole requests and never negative.
 *
 * @throws {MetricsReadError} when the text is not Prometheus exposition format, or a required
 * series is missing or not a finite number; `missing` names the offending series.
 */
export function readMetrics(framework: MetricsFramework, text: string): MetricsReading {
  const index = indexFamilies(framework, parseExposition(framework, text));
  if (framework === "tgi" && hasNoSampleLines(text)) return idleReading();
  const names = framework === "vllm" ? VLLM_SERIES : TGI_SERIES;
  const problems: SeriesProblem[] = [];
  const running = requiredCount(index, names.running, problems);
  const waiting = requiredCount(index, names.waiting, problems);
  if (problems.length > 0) {
    throw new MetricsReadError(
      framework,
      `unreadable ${framework} metrics: ${problems.map((p) => p.reason).join("; ")}`,
      problems.map((p) => p.series),
    );
  }
  const common = {
    running,
    waiting,
    queueDepth: running + waiting,
    freeMemoryGib: freeMemoryGib(index),
    instanceId: instanceId(index),
    tokenLatency: tokenLatency(text, names.tokenLatency),
  };
  if (framework === "vllm") {
    return {
      ...common,
      kvCacheUsage: kvCacheUsage(index, VLLM_SERIES.kvCache),
      promptTokensTotal: optionalSum(index, VLLM_SERIES.promptTokens),
      generationTokensTotal: optionalSum(index, VLLM_SERIES.generationTokens),
    };
  }
  return {
    ...common,
    kvCacheUsage: null,
    promptTokensTotal: histogramSum(index, TGI_SERIES.promptTokens),
    generationTokensTotal: histogramSum(index, TGI_SERIES.generationTokens),
  };
}

/**
 * Judged on the raw lines rather than on the parse, because the parser silently discards
 * lines it cannot name (a JSON body parses to nothing) and those must not pass for idle.
 */
function hasNoSampleLines(text: string): boolean {
  return text.split("\n").every((line) => {
    const trimmed = line.trim();
    return trimmed === "" || trimmed.startsWith("#");
  });
}

/** A node with nothing running or waiting and no other figures (e.g. a provider without metrics). */
export function idleReading(): MetricsReading {
  return {
    running: 0,
    waiting: 0,
    queueDepth: 0,
    kvCacheUsage: null,
    freeMemoryGib: null,
    promptTokensTotal: null,
    generationTokensTotal: null,
    tokenLatency: null,
    instanceId: null,
  };
}

function parseExposition(framework: MetricsFramework, text: string): PrometheusFamily[] {
  if (typeof text !== "string") {
    throw new MetricsReadError(framework, `unreadable ${framework} metrics: body is not text`);
  }
  try {
    // The parser emits a family only when a later line closes it, so without a trailing
    // newline it silently drops the last sample line.
    return parsePrometheusTextFormat(`${text}\n`);
  } catch (error) {
    // The parser throws on malformed lines and, for some malformed histograms, fails inside
    // its own bookkeeping; either way the body is not usable exposition text.
    const reason = error instanceof Error ? error.message : String(error);
    throw new MetricsReadError(framework, `unreadable ${framework} metrics: ${reason}`);
  }
}

/** Families by name; a name split over non-adjacent blocks is merged. Empty families dropped. */
type FamilyIndex = Map<string, { type: string; samples: PrometheusSample[] }>;

function indexFamilies(framework: MetricsFramework, families: unknown): FamilyIndex {
  if (!Array.isArray(families)) {
    throw new MetricsReadError(
      framework,
      `unreadable ${framework} metrics: parser returned no families`,
    );
  }
  const index: FamilyIndex = new Map();
  for (const family of families as PrometheusFamily[]) {
    if (family.metrics.length === 0) continue;
    const entry = index.get(family.name);
    if (entry) entry.samples.push(...family.metrics);
    else index.set(family.name, { type: family.type, samples: [...family.metrics] });
  }
  return index;
}

/** Sample values of a gauge or counter, or `undefined` when the series is absent. */
function values(index: FamilyIndex, name: string): number[] | undefined {
  return index.get(name)?.samples.map((sample) => Number(sample.value ?? Number.NaN));
}

interface SeriesProblem {
  readonly series: string;
  readonly reason: string;
}

function requiredCount(index: FamilyIndex, name: string, problems: SeriesProblem[]): number {
  const found = values(index, name);
  if (found === undefined) {
    problems.push({ series: name, reason: `missing series ${name}` });
    return 0;
  }
  if (!found.every(Number.isFinite)) {
    problems.push({ series: name, reason: `series ${name} has a non-numeric value` });
    return 0;
  }
  return Math.max(0, Math.round(sum(found)));
}

function optionalSum(index: FamilyIndex, name: string): number | null {
  const found = values(index, name);
  if (found === undefined || !found.every(Number.isFinite)) return null;
  return sum(found);
}

function kvCacheUsage(index: FamilyIndex, names: readonly string[]): number | null {
  for (const name of names) {
    const found = values(index, name)?.filter(Number.isFinite);
    if (found !== undefined && found.length > 0) return Math.min(1, Math.max(0, ...found));
  }
  return null;
}

/** `_sum` of an unlabelled histogram, whether or not the exposition declared its type. */
function histogramSum(index: FamilyIndex, name: string): number | null {
  const family = index.get(name);
  if (family !== undefined) {
    const sums = family.samples
      .map((sample) => sample.sum)
      .filter((value): value is string => value !== undefined)
      .map(Number);
    if (sums.length > 0 && sums.every(Number.isFinite)) return sum(sums);
  }
  // Without a TYPE line the parser files `<name>_sum` as a family of its own.
  return optionalSum(index, `${name}_sum`);
}

/**
 * The first of `names` whose `_sum` and `_count` are reported, each summed over its label
 * sets. Read from the text itself: the parser drops the `_sum` and `_count` of a histogram
 * whose samples carry labels (as on the real vLLM capture in the tests).
 */
function tokenLatency(text: string, names: readonly string[]): TokenLatencyTotals | null {
  for (const name of names) {
    const seconds = seriesTotal(text, `${name}_sum`);
    const count = seriesTotal(text, `${name}_count`);
    if (seconds !== null && count !== null && seconds >= 0 && count >= 0) {
      return { seconds, count };
    }
  }
  return null;
}

/**
 * Sum of every sample line of `series` (`series{labels} value [timestamp]`); `null` when
 * there is none or one is not a finite number.
 */
function seriesTotal(text: string, series: string): number | null {
  let total: number | null = null;
  let from = text.indexOf(series);
  while (from !== -1) {
    const lineStart = from === 0 || text[from - 1] === "\n";
    const next = text[from + series.length];
    if (lineStart && (next === "{" || next === " " || next === "\t")) {
      const lineEnd = text.indexOf("\n", from);
      const line = text.slice(from + series.length, lineEnd === -1 ? undefined : lineEnd);
      // Label values may hold anything but the value comes after the last closing brace.
      const rest = next === "{" ? line.slice(line.lastIndexOf("}") + 1) : line;
      const value = Number(rest.trim().split(/\s+/)[0]);
      if (!Number.isFinite(value)) return null;
      total = (total ?? 0) + value;
    }
    from = text.indexOf(series, from + series.length);
  }
  return total;
}

function freeMemoryGib(index: FamilyIndex): number | null {
  const mib = optionalSum(index, DCGM_FB_FREE_MIB);
  return mib === null ? null : Math.max(0, mib) / 1024;
}

function instanceId(index: FamilyIndex): string | null {
  for (const sample of index.get(INSTANCE_INFO)?.samples ?? []) {
    const id = sample.labels?.["instance_id"];
    if (id !== undefined && id !== "") return id;
  }
  return null;
}

function sum(numbers: readonly number[]): number {
  return numbers.reduce((total, n) => total + n, 0);
}
