import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import type { MetricsReading, ProbeResult } from "@zml/health";

export const spec = (id: string, maxConcurrency = 8): NodeSpec =>
  nodeSpec(id, { endpoint: "http://127.0.0.1:1", max_concurrency: maxConcurrency });

export function reading(overrides: Partial<MetricsReading> = {}): MetricsReading {
  return {
    running: 1,
    waiting: 0,
    queueDepth: 1,
    kvCacheUsage: 0.1,
    freeMemoryGib: null,
    promptTokensTotal: null,
    generationTokensTotal: null,
    tokenLatency: null,
    instanceId: "inst-a",
    prefixCache: null,
    prefill: null,
    kvCacheCapacityTokens: null,
    servedModels: null,
    slots: null,
    ...overrides,
  };
}

export const OK: ProbeResult = { ok: true, reading: reading() };
export const FAIL: ProbeResult = { ok: false, error: "health endpoint answered 503" };

/** Log lines captured as objects. */
export function captureLog() {
  const lines: Array<{ msg: string | undefined } & Record<string, unknown>> = [];
  const at = (level: string) => (obj: object, msg?: string) => lines.push({ ...obj, msg, level });
  return { lines, info: at("info"), debug: at("debug"), warn: at("warn"), error: at("error") };
}
