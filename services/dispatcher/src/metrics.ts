import { Counter } from "prom-client";
import type { Registry } from "prom-client";

export interface DispatcherMetrics {
  decisions: Counter<"outcome">;
  attempts: Counter<"node" | "outcome">;
}

export function createDispatcherMetrics(registry: Registry): DispatcherMetrics {
  return {
    decisions: new Counter({
      name: "zml_dispatcher_decisions_total",
      help: "Routing decisions by outcome (routed, saturated, no_node_available, ...)",
      labelNames: ["outcome"],
      registers: [registry],
    }),
    attempts: new Counter({
      name: "zml_dispatcher_attempts_total",
      help: "Dispatch attempts by node and outcome (relayed, retryable, broken)",
      labelNames: ["node", "outcome"],
      registers: [registry],
    }),
  };
}
