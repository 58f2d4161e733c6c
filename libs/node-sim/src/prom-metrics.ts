// The prom-client pieces every simulated engine's metrics are built from.
import { Counter, Gauge, Histogram } from "prom-client";
import type { Registry } from "prom-client";

/** Makers of metrics in one registry that all carry the same labels. */
export interface LabelledMetrics<L extends string> {
  readonly gauge: (name: string, help: string) => Gauge<L>;
  readonly counter: (name: string, help: string) => Counter<L>;
  readonly histogram: (name: string, help: string, buckets: readonly number[]) => Histogram<L>;
}

/**
 * Metrics of `registry` labelled `labels`, each shown at 0 from the start, as the engines
 * export theirs before the first request.
 */
export function labelledMetrics<L extends string>(
  registry: Registry,
  labels: Readonly<Record<L, string>>,
): LabelledMetrics<L> {
  const labelNames = Object.keys(labels) as L[];
  const registers = [registry];
  return {
    gauge: (name, help) => {
      const gauge = new Gauge<L>({ name, help, labelNames, registers });
      gauge.set(labels, 0);
      return gauge;
    },
    counter: (name, help) => {
      const counter = new Counter<L>({ name, help, labelNames, registers });
      counter.inc(labels, 0);
      return counter;
    },
    histogram: (name, help, buckets) => {
      const histogram = new Histogram<L>({
        name,
        help,
        labelNames,
        buckets: [...buckets],
        registers,
      });
      histogram.zero(labels);
      return histogram;
    },
  };
}

/** `zml_sim_instance_info`, which every flavour ends its exposition with. */
export function registerInstanceInfo(registry: Registry, instanceId: string): void {
  new Gauge({
    name: "zml_sim_instance_info",
    help: "Identity of this simulated node process.",
    labelNames: ["instance_id"],
    registers: [registry],
  }).set({ instance_id: instanceId }, 1);
}

/** Records `value` `times` times: prom-client observes one value per call. */
export function observeTimes<L extends string>(
  histogram: Histogram<L>,
  labels: Partial<Record<L, string>>,
  value: number,
  times: number,
): void {
  for (let i = 0; i < times; i++) histogram.observe(labels, value);
}
