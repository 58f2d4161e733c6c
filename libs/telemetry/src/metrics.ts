import { Registry, collectDefaultMetrics } from "prom-client";

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
