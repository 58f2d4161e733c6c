import { readFileSync } from "node:fs";
import type { NodeObservation } from "@zml/contracts";
import type { MetricsReading, ProbeResult } from "../src/index.ts";

export function fixture(name: string): string {
  return readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8");
}

export function reading(overrides: Partial<MetricsReading> = {}): MetricsReading {
  const running = overrides.running ?? 1;
  const waiting = overrides.waiting ?? 0;
  return {
    running,
    waiting,
    queueDepth: running + waiting,
    kvCacheUsage: 0.2,
    freeMemoryGib: 10,
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

export function ok(overrides: Partial<MetricsReading> = {}): ProbeResult {
  return { ok: true, reading: reading(overrides) };
}

export const FAIL: ProbeResult = { ok: false, error: "connect ECONNREFUSED 10.0.0.5:8000" };

export function observation(at: number, overrides: Partial<NodeObservation> = {}): NodeObservation {
  return {
    type: "node.observation.v1",
    node_id: "h100-a",
    decision_id: `d-${at}`,
    outcome: "ok",
    status: 200,
    latency_ms: 120,
    ttft_ms: 40,
    at,
    ...overrides,
  };
}

export const FIVE_XX: Partial<NodeObservation> = { outcome: "http_error", status: 503 };

/** Freezes a value and everything reachable from it, so any mutation throws. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
