import { Registry, collectDefaultMetrics } from "prom-client";
import type { Metric } from "prom-client";

export interface MetricsOptions {
  /** Added as the `service` label on every metric of the registry. */
  service: string;
}

export interface Metrics {
  /** Register the service's own counters, gauges and histograms here (`registers: [registry]`). */
  registry: Registry;
}

/**
 * Creates a Prometheus registry for one service: a fresh one rather than prom-client's
 * global, so tests and in-process stacks never share or double-register metrics. Node
 * process metrics (CPU, memory, event loop lag, GC, handles) are collected into it.
 */
export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: options.service });
  collectDefaultMetrics({ register: registry });
  return { registry };
}

/**
 * Runs one start-up attempt with a registry of its own and, once it succeeds, moves the
 * metrics it registered into `registry` (which keeps its default labels). A start that fails
 * and is tried again (`startWhenPossible`) would otherwise register its metrics a second
 * time, which prom-client refuses; a failed attempt's metrics are dropped with it.
 */
export async function withAttemptRegistry<T>(
  registry: Registry,
  start: (attempt: Registry) => Promise<T>,
): Promise<T> {
  const attempt = new Registry();
  const started = await start(attempt);
  // getMetricsAsArray hands out the registered metric objects themselves.
  for (const metric of attempt.getMetricsAsArray())
    registry.registerMetric(metric as unknown as Metric);
  return started;
}
