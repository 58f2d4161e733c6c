import { describe, expect, it } from "vitest";
import { parseNodeCounters } from "./node-counters.ts";
import { generateRequests, hashedNode, workloads } from "./workloads.ts";

const all = workloads();
const chars = (r: { messages: Array<{ content: string }> }) =>
  r.messages.reduce((n, m) => n + m.content.length, 0);

describe("routing-quality workloads", () => {
  it("give the same requests for the same seed, and other arrivals for another", () => {
    const a = generateRequests(all["shared-uniform"], 7, 5);
    const b = generateRequests(all["shared-uniform"], 7, 5);
    const c = generateRequests(all["shared-uniform"], 8, 5);
    expect(b).toEqual(a);
    expect(c.map((r) => r.atMs)).not.toEqual(a.map((r) => r.atMs));
    // Poisson at 60/s over 5 s: 300 expected; far outside ±25 % means the arrivals are wrong.
    expect(a.length).toBeGreaterThan(225);
    expect(a.length).toBeLessThan(375);
    expect(a[0]!.atMs).toBeLessThan(200);
  });

  it("change only the prompts' text with the salt: same arrivals, tenants and sizes", () => {
    const a = generateRequests(all["zipf-hot"], 7, 3, undefined, "side-a");
    const b = generateRequests(all["zipf-hot"], 7, 3, undefined, "side-b");
    expect(b.map((r) => [r.atMs, r.affinityKey, chars(r)])).toEqual(
      a.map((r) => [r.atMs, r.affinityKey, chars(r)]),
    );
    expect(b[0]!.messages[0]!.content).not.toBe(a[0]!.messages[0]!.content);
  });

  it("share each tenant's system prompt of about 2,000 tokens, uniformly over 64 tenants", () => {
    const requests = generateRequests(all["shared-uniform"], 7, 20);
    const byTenant = new Map<string, string>();
    for (const r of requests) {
      const system = r.messages[0]!.content;
      expect(system.length).toBe(8000);
      expect(byTenant.get(r.affinityKey) ?? system).toBe(system);
      byTenant.set(r.affinityKey, system);
    }
    expect(byTenant.size).toBe(64);
    expect(new Set(byTenant.values()).size).toBe(64);
  });

  it("skew zipf-hot so that one tenant takes more than a third of the requests", () => {
    const requests = generateRequests(all["zipf-hot"], 7, 20);
    const hot = requests.filter((r) => r.affinityKey === "t0").length / requests.length;
    expect(hot).toBeGreaterThan(0.33);
    expect(hot).toBeLessThan(0.45);
  });

  it("resend a conversation's whole context in multi-turn, one more turn each time", () => {
    const requests = generateRequests(all["multi-turn"], 7, 10);
    const seen = new Map<string, string[]>();
    for (const r of requests) {
      const contents = r.messages.map((m) => `${m.role}:${m.content}`);
      const before = seen.get(r.affinityKey);
      if (before !== undefined) {
        expect(contents.slice(0, before.length)).toEqual(before);
        expect(contents.length).toBe(before.length + 2);
      }
      seen.set(r.affinityKey, contents);
    }
    expect(Math.max(...requests.map((r) => r.messages.length))).toBe(20);
  });

  it("share no prefix in no-prefix: every prompt's first block differs", () => {
    const requests = generateRequests(all["no-prefix"], 7, 3);
    const firstBlocks = new Set(requests.map((r) => r.messages[0]!.content.slice(0, 64)));
    expect(firstBlocks.size).toBe(requests.length);
  });

  it("hash a key to the same node every time, and spread keys over the nodes", () => {
    const nodes = Array.from({ length: 64 }, (_, t) => hashedNode(`t${t}`, 8));
    expect(nodes).toEqual(Array.from({ length: 64 }, (_, t) => hashedNode(`t${t}`, 8)));
    expect(new Set(nodes).size).toBe(8);
  });
});

describe("node counters", () => {
  it("sum each vLLM series over its label sets", () => {
    const text = [
      "# TYPE vllm:prefix_cache_queries_total counter",
      'vllm:prefix_cache_queries_total{model_name="m",engine="0"} 100.0',
      'vllm:prefix_cache_queries_total{model_name="m",engine="1"} 50.0',
      'vllm:prefix_cache_hits_total{model_name="m",engine="0"} 80.0',
      'vllm:prompt_tokens_total{model_name="m",engine="0"} 150.0',
      'vllm:generation_tokens_total{model_name="m",engine="0"} 9.0',
      'vllm:request_success_total{model_name="m",engine="0",finished_reason="stop"} 2.0',
      'vllm:request_success_total{model_name="m",engine="0",finished_reason="length"} 1.0',
      'vllm:num_requests_running{model_name="m",engine="0"} 1.0',
      'vllm:num_requests_waiting{model_name="m",engine="0"} 0.0',
    ].join("\n");
    expect(parseNodeCounters(text)).toEqual({
      prefixCacheQueries: 150,
      prefixCacheHits: 80,
      promptTokens: 150,
      generationTokens: 9,
      requestsSucceeded: 3,
      running: 1,
      waiting: 0,
    });
    expect(() => parseNodeCounters("vllm:num_requests_running 1")).toThrow(/prefix_cache_queries/);
  });
});
