// Prefix-cache hit rate, prefill speed and KV capacity: from the engines' readings into
// node.state, over successive probes, as cache-aware routing reads them.
import { NodeStateSchema } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_HEALTH_CONFIG,
  applyProbe,
  createNodeHealth,
  readMetrics,
  toNodeState,
  type NodeHealth,
  type ProbeResult,
} from "../src/index.ts";
import { FAIL, ok } from "./helpers.ts";

const config = DEFAULT_HEALTH_CONFIG;
const T0 = 1_750_000_000_000;
const POLL = 5_000;

function run(probes: readonly ProbeResult[]): NodeHealth[] {
  const seen: NodeHealth[] = [];
  let h = createNodeHealth("cpu-a", T0);
  probes.forEach((probe, i) => {
    h = applyProbe(h, probe, config, T0 + i * POLL);
    seen.push(h);
  });
  return seen;
}

const state = (h: NodeHealth) => NodeStateSchema.parse(toNodeState(h, T0));

/** llama.cpp's metrics with the given counters (the shape of the real capture). */
const llamacpp = (computed: number, cached: number, promptSeconds: number) =>
  readMetrics(
    "llamacpp",
    [
      `llamacpp:prompt_tokens_total ${computed}`,
      `llamacpp:prompt_tokens_cached_total ${cached}`,
      `llamacpp:prompt_seconds_total ${promptSeconds}`,
      "llamacpp:requests_processing 0",
      "llamacpp:requests_deferred 0",
    ].join("\n"),
  );

describe("prefix-cache hit rate", () => {
  it("is the share of the interval's prompt tokens served from cache, unknown before a baseline", () => {
    const [first, second, third] = run([
      { ok: true, reading: llamacpp(100, 0, 0.1) },
      // 100 more tokens, 300 from cache: 300 of 400.
      { ok: true, reading: llamacpp(200, 300, 0.2) },
      { ok: true, reading: llamacpp(250, 450, 0.25) },
    ]);
    expect(state(first!).prefix_cache_hit_rate).toBeNull();
    expect(state(second!).prefix_cache_hit_rate).toBe(0.75);
    expect(state(third!).prefix_cache_hit_rate).toBe(0.75);
  });

  it("is unknown, not zero, for an interval without prompts or after counters went backwards", () => {
    const [, idle, restarted] = run([
      { ok: true, reading: llamacpp(200, 300, 0.2) },
      { ok: true, reading: llamacpp(200, 300, 0.2) },
      { ok: true, reading: llamacpp(10, 0, 0.01) },
    ]);
    expect(state(idle!).prefix_cache_hit_rate).toBeNull();
    expect(state(restarted!).prefix_cache_hit_rate).toBeNull();
  });

  it("takes an engine's own rate (SGLang's cache_hit_rate) as it is", () => {
    const [h] = run([ok({ prefixCache: { kind: "rate", hitRate: 0.42 } })]);
    expect(state(h!).prefix_cache_hit_rate).toBe(0.42);
  });

  it("reads vLLM's queries and hits counters the same way", () => {
    const vllm = (queries: number, hits: number) =>
      readMetrics(
        "vllm",
        "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n" +
          `vllm:prefix_cache_queries_total{engine="0",model_name="m"} ${queries}\n` +
          `vllm:prefix_cache_hits_total{engine="0",model_name="m"} ${hits}\n`,
      );
    const [, second] = run([
      { ok: true, reading: vllm(1000, 100) },
      { ok: true, reading: vllm(2000, 700) },
    ]);
    expect(state(second!).prefix_cache_hit_rate).toBe(0.6);
  });
});

describe("prefill tokens per second", () => {
  it("is an EWMA of computed prompt tokens per second of prefill, kept through idle intervals", () => {
    const seen = run([
      { ok: true, reading: llamacpp(0, 0, 0) },
      // 1000 tokens in 0.5 s: 2000/s.
      { ok: true, reading: llamacpp(1000, 0, 0.5) },
      { ok: true, reading: llamacpp(1000, 0, 0.5) },
      // 1000 tokens in 0.25 s: 4000/s, averaged in.
      { ok: true, reading: llamacpp(2000, 0, 0.75) },
    ]);
    const rates = seen.map((h) => state(h).prefill_tokens_per_second);
    expect(rates.slice(0, 3)).toEqual([null, 2000, 2000]);
    expect(rates[3]).toBeCloseTo(2000 + config.ewmaAlpha * 2000, 6);
  });

  it("ignores tokens served from cache: they need no prefill", () => {
    const [, h] = run([
      { ok: true, reading: llamacpp(100, 0, 0.1) },
      { ok: true, reading: llamacpp(200, 5000, 0.2) },
    ]);
    expect(state(h!).prefill_tokens_per_second).toBeCloseTo(1000, 6);
  });
});

describe("KV-cache capacity", () => {
  it("is published as last read, and unknown when the engine does not say", () => {
    const [known, unknown] = run([ok({ kvCacheCapacityTokens: 37_440 }), ok()]);
    expect(state(known!).kv_cache_capacity_tokens).toBe(37_440);
    expect(state(unknown!).kv_cache_capacity_tokens).toBeNull();
  });
});

describe("health score of a node whose probes fail", () => {
  it("is never 100, and 0 when every probe fails", () => {
    const [, degraded] = run([ok({ running: 0, waiting: 0, queueDepth: 0 }), FAIL]);
    expect(state(degraded!).health_score).toBeLessThan(100);
    const never = run([FAIL, FAIL, FAIL]);
    expect(state(never.at(-1)!)).toMatchObject({ status: "Isolated", health_score: 0 });
  });
});
