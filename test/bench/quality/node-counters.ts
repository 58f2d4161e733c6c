// What the caching nodes say about themselves, read from their own Prometheus `/metrics`
// (vLLM's series, summed over label sets), so that hit rates and prefill figures are the
// nodes' counts, never the client's estimates.
import { setTimeout as sleep } from "node:timers/promises";
import { parsePrometheusText } from "@zml/health";
import { request } from "undici";

export interface NodeCounters {
  prefixCacheQueries: number;
  prefixCacheHits: number;
  promptTokens: number;
  generationTokens: number;
  requestsSucceeded: number;
  running: number;
  waiting: number;
}

const SERIES: Record<keyof NodeCounters, string> = {
  prefixCacheQueries: "vllm:prefix_cache_queries_total",
  prefixCacheHits: "vllm:prefix_cache_hits_total",
  promptTokens: "vllm:prompt_tokens_total",
  generationTokens: "vllm:generation_tokens_total",
  requestsSucceeded: "vllm:request_success_total",
  running: "vllm:num_requests_running",
  waiting: "vllm:num_requests_waiting",
};

/** Sums every sample of each series in a Prometheus text exposition. */
export function parseNodeCounters(text: string): NodeCounters {
  const { series } = parsePrometheusText(text);
  const out = {} as NodeCounters;
  for (const [key, name] of Object.entries(SERIES) as Array<[keyof NodeCounters, string]>) {
    const samples = series.get(name);
    if (samples === undefined) throw new Error(`the node's metrics have no ${name}`);
    out[key] = samples.reduce((total, sample) => total + sample.value, 0);
  }
  return out;
}

export async function readNodeCounters(url: string): Promise<NodeCounters> {
  const res = await request(`${url}/metrics`);
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${url}/metrics answered ${res.statusCode}`);
  return parseNodeCounters(text);
}

/** Counter growth between two readings (gauges: the later value). */
export function delta(before: NodeCounters, after: NodeCounters): NodeCounters {
  return {
    prefixCacheQueries: after.prefixCacheQueries - before.prefixCacheQueries,
    prefixCacheHits: after.prefixCacheHits - before.prefixCacheHits,
    promptTokens: after.promptTokens - before.promptTokens,
    generationTokens: after.generationTokens - before.generationTokens,
    requestsSucceeded: after.requestsSucceeded - before.requestsSucceeded,
    running: after.running,
    waiting: after.waiting,
  };
}

/** Waits until no node runs or queues anything (the last side's answers have all ended). */
export async function waitUntilIdle(urls: string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const readings = await Promise.all(urls.map(readNodeCounters));
    if (readings.every((r) => r.running === 0 && r.waiting === 0)) return;
    if (Date.now() > deadline) {
      throw new Error(`nodes still busy after ${timeoutMs} ms: ${JSON.stringify(readings)}`);
    }
    await sleep(100);
  }
}

/** Cold caches: vLLM's `POST /reset_prefix_cache` on every node. */
export async function resetPrefixCaches(urls: string[]): Promise<void> {
  await Promise.all(
    urls.map(async (url) => {
      const res = await request(`${url}/reset_prefix_cache`, { method: "POST" });
      await res.body.dump();
      if (res.statusCode !== 200) {
        throw new Error(`${url}/reset_prefix_cache answered ${res.statusCode}`);
      }
    }),
  );
}
