import { MetricsReadError } from "./errors.ts";
import {
  firstSeriesTotal,
  firstSum,
  hasNoSampleLines,
  histogramSum,
  histogramTotals,
  maxShare,
  optionalSum,
  parseExposition,
  requiredCount,
  samples,
  seriesTotal,
} from "./exposition.ts";
import type { Exposition, SeriesProblem } from "./exposition.ts";
import type { PrometheusSample } from "./prometheus-text.ts";

/** Serving engines whose Prometheus metrics {@link readMetrics} understands. */
export const METRICS_FRAMEWORKS = ["vllm", "tgi", "llamacpp", "sglang"] as const;
export type MetricsFramework = (typeof METRICS_FRAMEWORKS)[number];

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
  /** How much of the prompts the engine served from its prefix cache; `null` when not reported. */
  readonly prefixCache: PrefixCacheReading | null;
  /**
   * Cumulative prompt tokens the engine computed (not served from cache) and the seconds it
   * spent on them; between two probes Δtokens ÷ Δseconds is its prefill rate. `null` when
   * not reported.
   */
  readonly prefill: PrefillTotals | null;
  /** Tokens the KV cache holds in all; `null` when not reported. */
  readonly kvCacheCapacityTokens: number | null;
  /**
   * Model ids the engine says it serves (its `/v1/models`, TGI's `/info`), which the probe reads
   * beside the metrics; `null` when not known.
   */
  readonly servedModels: readonly string[] | null;
  /**
   * Requests the engine runs at once, where it says (llama.cpp's slots, from `/slots`): a hint
   * for the node's `max_concurrency`. `null` when not known.
   */
  readonly slots: number | null;
}

/** Cumulative totals of a time-per-output-token histogram. */
export interface TokenLatencyTotals {
  readonly seconds: number;
  readonly count: number;
}

/**
 * Prefix-cache figures as the engine gives them: cumulative counters of prompt tokens looked
 * up (`queries`) and found (`hits`), whose growth between probes is the interval's hit rate;
 * or a hit rate the engine computed itself over its own window.
 */
export type PrefixCacheReading =
  | { readonly kind: "counters"; readonly queries: number; readonly hits: number }
  | { readonly kind: "rate"; readonly hitRate: number };

/** Cumulative prompt tokens computed and the seconds spent computing them. */
export interface PrefillTotals {
  readonly tokens: number;
  readonly seconds: number;
}

const VLLM = {
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
  // V1 counters; prometheus_client renders a counter with `_total`, and some exporters
  // (and our simulator) without it.
  prefixQueries: ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"],
  prefixHits: ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"],
  prefillSeconds: "vllm:request_prefill_time_seconds_sum",
  cacheConfig: "vllm:cache_config_info",
} as const;

const TGI = {
  running: "tgi_batch_current_size",
  waiting: "tgi_queue_size",
  // TGI has no token counters; the sums of these per-request histograms grow monotonically
  // and serve as counters (they advance when a request finishes).
  promptTokens: "tgi_request_input_length",
  generationTokens: "tgi_request_generated_tokens",
  tokenLatency: ["tgi_request_mean_time_per_token_duration"],
} as const;

/** llama.cpp `llama-server --metrics` (tools/server/server-task.cpp, `to_metrics`). */
const LLAMACPP = {
  running: "llamacpp:requests_processing",
  waiting: "llamacpp:requests_deferred",
  // Excludes the prompt tokens served from a slot's cache, which are counted apart.
  promptTokens: "llamacpp:prompt_tokens_total",
  promptCached: "llamacpp:prompt_tokens_cached_total",
  promptSeconds: "llamacpp:prompt_seconds_total",
  generationTokens: "llamacpp:tokens_predicted_total",
  generationSeconds: "llamacpp:tokens_predicted_seconds_total",
  // Older servers exported KV usage; current ones do not.
  kvCache: ["llamacpp:kv_cache_usage_ratio"],
} as const;

/** SGLang `--enable-metrics`, as its "Production Metrics" documentation shows them. */
const SGLANG = {
  running: "num_running_reqs",
  waiting: "num_queue_reqs",
  kvCache: "token_usage",
  cacheHitRate: "cache_hit_rate",
  promptTokens: "prompt_tokens_total",
  generationTokens: "generation_tokens_total",
  tokenLatency: "time_per_output_token_seconds",
  capacity: "max_total_num_tokens",
} as const;

/** Our node simulator's identity series; real frameworks do not expose one. */
const INSTANCE_INFO = "zml_sim_instance_info";
/** NVIDIA DCGM exporter: free framebuffer memory in MiB, one sample per GPU. */
const DCGM_FB_FREE_MIB = "DCGM_FI_DEV_FB_FREE";

const ENGINE_NAMES: Record<MetricsFramework, string> = {
  vllm: "vLLM",
  tgi: "TGI",
  llamacpp: "llama.cpp",
  sglang: "SGLang",
};

/**
 * Reads a node's Prometheus `/metrics` text into a {@link MetricsReading}. The series read
 * for each engine are in this package's README; in short:
 *
 * - vLLM: `vllm:num_requests_running` and `vllm:num_requests_waiting` required; KV usage from
 *   `vllm:kv_cache_usage_perc` or the deprecated `vllm:gpu_cache_usage_perc`; prefix cache
 *   from `vllm:prefix_cache_queries`/`_hits`; capacity from `vllm:cache_config_info`.
 * - TGI: `tgi_batch_current_size` and `tgi_queue_size` required; a body with no sample lines
 *   reads as idle, since TGI renders its gauges only after its first request.
 * - llama.cpp: `llamacpp:requests_processing` and `llamacpp:requests_deferred` required.
 * - SGLang: `sglang:num_running_reqs` and `sglang:num_queue_reqs` required (also under the
 *   `sglang_` prefix of newer releases).
 *
 * Running and waiting are rounded to whole requests and never negative.
 *
 * @throws {MetricsReadError} when the text is not Prometheus exposition format, or a required
 * series is missing or not a finite number; `missing` names the offending series, and the
 * message says which framework the text looks like when it is another known engine's.
 */
export function readMetrics(framework: MetricsFramework, text: string): MetricsReading {
  const e = parseExposition(framework, text);
  if (framework === "tgi" && hasNoSampleLines(text)) return idleReading();
  const problems: SeriesProblem[] = [];
  const reading = READERS[framework](e, problems);
  if (problems.length > 0) {
    const hint = frameworkHint(framework, text);
    throw new MetricsReadError(
      framework,
      `unreadable ${framework} metrics: ${problems.map((p) => p.reason).join("; ")}` +
        (hint === null ? "" : `; ${hint}`),
      problems.map((p) => p.series),
    );
  }
  return reading;
}

type Reader = (e: Exposition, problems: SeriesProblem[]) => MetricsReading;

const READERS: Record<MetricsFramework, Reader> = {
  vllm: readVllm,
  tgi: readTgi,
  llamacpp: readLlamacpp,
  sglang: readSglang,
};

function readVllm(e: Exposition, problems: SeriesProblem[]): MetricsReading {
  const running = requiredCount(e, VLLM.running, problems);
  const waiting = requiredCount(e, VLLM.waiting, problems);
  const promptTokensTotal = optionalSum(e, VLLM.promptTokens);
  const queries = firstSeriesTotal(e, VLLM.prefixQueries);
  const hits = firstSeriesTotal(e, VLLM.prefixHits);
  const prefillSeconds = seriesTotal(e, VLLM.prefillSeconds);
  return {
    ...common(e),
    running,
    waiting,
    queueDepth: running + waiting,
    kvCacheUsage: maxShare(e, VLLM.kvCache),
    promptTokensTotal,
    generationTokensTotal: optionalSum(e, VLLM.generationTokens),
    tokenLatency: tokenLatency(e, VLLM.tokenLatency),
    prefixCache: queries !== null && hits !== null ? { kind: "counters", queries, hits } : null,
    // The prompt counter includes the tokens served from the prefix cache; only the rest
    // were computed in the prefill time.
    prefill:
      promptTokensTotal !== null && prefillSeconds !== null
        ? { tokens: Math.max(0, promptTokensTotal - (hits ?? 0)), seconds: prefillSeconds }
        : null,
    kvCacheCapacityTokens: vllmCapacity(e),
    servedModels: null,
    slots: null,
  };
}

/**
 * `num_gpu_blocks × block_size` from the labels of `vllm:cache_config_info`, summed over
 * engines (each V1 engine has its own cache). `null` when any engine lacks either label (vLLM
 * renders `None` until the profiler has sized the cache).
 */
function vllmCapacity(e: Exposition): number | null {
  const info = samples(e, VLLM.cacheConfig);
  if (info === undefined) return null;
  let total = 0;
  for (const sample of info) {
    const blocks = Number(sample.labels["num_gpu_blocks"]);
    const size = Number(sample.labels["block_size"]);
    if (!(Number.isInteger(blocks) && Number.isInteger(size) && blocks > 0 && size > 0)) {
      return null;
    }
    total += blocks * size;
  }
  return total > 0 ? total : null;
}

function readTgi(e: Exposition, problems: SeriesProblem[]): MetricsReading {
  const running = requiredCount(e, TGI.running, problems);
  const waiting = requiredCount(e, TGI.waiting, problems);
  return {
    ...common(e),
    running,
    waiting,
    queueDepth: running + waiting,
    kvCacheUsage: null,
    promptTokensTotal: histogramSum(e, TGI.promptTokens),
    generationTokensTotal: histogramSum(e, TGI.generationTokens),
    tokenLatency: tokenLatency(e, TGI.tokenLatency),
    prefixCache: null,
    prefill: null,
    kvCacheCapacityTokens: null,
    servedModels: null,
    slots: null,
  };
}

function readLlamacpp(e: Exposition, problems: SeriesProblem[]): MetricsReading {
  const running = requiredCount(e, LLAMACPP.running, problems);
  const waiting = requiredCount(e, LLAMACPP.waiting, problems);
  const computed = optionalSum(e, LLAMACPP.promptTokens);
  const cached = optionalSum(e, LLAMACPP.promptCached);
  const promptSeconds = optionalSum(e, LLAMACPP.promptSeconds);
  const generated = optionalSum(e, LLAMACPP.generationTokens);
  const generationSeconds = optionalSum(e, LLAMACPP.generationSeconds);
  return {
    ...common(e),
    running,
    waiting,
    queueDepth: running + waiting,
    kvCacheUsage: maxShare(e, LLAMACPP.kvCache),
    // Every prompt token, computed or served from cache, as the other engines count them.
    promptTokensTotal: computed === null ? null : computed + (cached ?? 0),
    generationTokensTotal: generated,
    // The generation time is summed over slots, each slot timing its own tokens: the mean is
    // one request's seconds per token, as the other engines' histograms give it.
    tokenLatency:
      generated !== null && generationSeconds !== null && generated >= 0 && generationSeconds >= 0
        ? { seconds: generationSeconds, count: generated }
        : null,
    prefixCache:
      computed !== null && cached !== null
        ? { kind: "counters", queries: computed + cached, hits: cached }
        : null,
    prefill:
      computed !== null && promptSeconds !== null
        ? { tokens: computed, seconds: promptSeconds }
        : null,
    // Not in its metrics: the probe reads the slots' contexts from `/slots`.
    kvCacheCapacityTokens: null,
    servedModels: null,
    slots: null,
  };
}

function readSglang(e: Exposition, problems: SeriesProblem[]): MetricsReading {
  // Releases from 0.5.4 name the series `sglang_…`; earlier ones, and the docs, `sglang:…`.
  const prefix =
    e.text.includes("\nsglang_") || e.text.startsWith("sglang_") ? "sglang_" : "sglang:";
  const name = (series: string) => `${prefix}${series}`;
  // Every tensor-parallel rank may export the same scheduler figures; rank 0 speaks for all.
  const rankZero: Exposition = { text: e.text, series: onlyRankZero(e) };
  const running = requiredCount(rankZero, name(SGLANG.running), problems);
  const waiting = requiredCount(rankZero, name(SGLANG.waiting), problems);
  const hitRate = maxShare(rankZero, [name(SGLANG.cacheHitRate)]);
  const capacity = optionalSum(rankZero, name(SGLANG.capacity));
  return {
    ...common(e),
    running,
    waiting,
    queueDepth: running + waiting,
    kvCacheUsage: maxShare(rankZero, [name(SGLANG.kvCache)]),
    promptTokensTotal: optionalSum(rankZero, name(SGLANG.promptTokens)),
    generationTokensTotal: optionalSum(rankZero, name(SGLANG.generationTokens)),
    tokenLatency: tokenLatency(e, [name(SGLANG.tokenLatency)]),
    prefixCache: hitRate === null ? null : { kind: "rate", hitRate },
    prefill: null,
    kvCacheCapacityTokens: capacity !== null && capacity > 0 ? Math.round(capacity) : null,
    servedModels: null,
    slots: null,
  };
}

function onlyRankZero(e: Exposition): Map<string, readonly PrometheusSample[]> {
  const kept = new Map<string, readonly PrometheusSample[]>();
  for (const [name, found] of e.series) {
    const rankZero = found.filter((sample) => {
      const rank = sample.labels["tp_rank"];
      return rank === undefined || rank === "0";
    });
    if (rankZero.length > 0) kept.set(name, rankZero);
  }
  return kept;
}

/** Figures every engine's exposition may carry beside its own. */
function common(e: Exposition): Pick<MetricsReading, "freeMemoryGib" | "instanceId"> {
  return { freeMemoryGib: freeMemoryGib(e), instanceId: instanceId(e) };
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
    prefixCache: null,
    prefill: null,
    kvCacheCapacityTokens: null,
    servedModels: null,
    slots: null,
  };
}

/**
 * Which known engine a metrics text comes from, by the prefix of its sample lines: `vllm:`,
 * `tgi_`, `llamacpp:`, `sglang:` or `sglang_`. `null` when none (or several) match.
 */
export function guessFramework(text: string): MetricsFramework | null {
  const found = new Set<MetricsFramework>();
  for (const line of text.split("\n")) {
    if (line.startsWith("vllm:")) found.add("vllm");
    else if (line.startsWith("tgi_")) found.add("tgi");
    else if (line.startsWith("llamacpp:")) found.add("llamacpp");
    else if (line.startsWith("sglang:") || line.startsWith("sglang_")) found.add("sglang");
  }
  const [only] = found;
  return found.size === 1 && only !== undefined ? only : null;
}

/** What to tell an operator whose node's metrics are another engine's; `null` when not so. */
export function frameworkHint(declared: string, text: string): string | null {
  const guess = guessFramework(text);
  if (guess === null || guess === declared) return null;
  return `these are ${ENGINE_NAMES[guess]} metrics: register the node with framework: ${guess}`;
}

/** The first of `names` whose `_sum` and `_count` are reported, each summed over its label sets. */
function tokenLatency(e: Exposition, names: readonly string[]): TokenLatencyTotals | null {
  for (const name of names) {
    const totals = histogramTotals(e, name);
    if (totals !== null && totals.sum >= 0 && totals.count >= 0) {
      return { seconds: totals.sum, count: totals.count };
    }
  }
  return null;
}

function freeMemoryGib(e: Exposition): number | null {
  const mib = firstSum(e, [DCGM_FB_FREE_MIB]);
  return mib === null ? null : Math.max(0, mib) / 1024;
}

function instanceId(e: Exposition): string | null {
  for (const sample of samples(e, INSTANCE_INFO) ?? []) {
    const id = sample.labels["instance_id"];
    if (id !== undefined && id !== "") return id;
  }
  return null;
}
