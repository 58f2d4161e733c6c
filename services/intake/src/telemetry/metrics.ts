import { Counter, Histogram } from "prom-client";
import type { Registry } from "prom-client";

export type IntakeMetrics = ReturnType<typeof createIntakeMetrics>;

export function createIntakeMetrics(registry: Registry) {
  return {
    requests: new Counter({
      name: "zml_intake_requests_total",
      help: "Every inference request, also those refused before routing, by route, final status and error code (499: the client went away; a stream that broke after its headers counts with its error's status and code)",
      labelNames: ["route", "status", "code"] as const,
      registers: [registry],
    }),
    duration: new Histogram({
      name: "zml_intake_request_duration_seconds",
      help: "Time from request to the end of the response, by route",
      labelNames: ["route"] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    }),
    addedLatency: new Histogram({
      name: "zml_intake_added_latency_seconds",
      help: "What ZML added: time to the first answer frame at intake minus the node's own time (whole answer, or time to headers for streams)",
      labelNames: ["route", "stream"] as const,
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    }),
  };
}
