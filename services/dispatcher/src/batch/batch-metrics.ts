import { Counter, Gauge } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";

/** The batch workers' series, registered once per dispatcher. */
export interface BatchMetrics {
  /**
   * Jobs by outcome: done, failed, expired, expired_wait, retried, dead_lettered, and
   * stored_earlier (acked from the result an earlier delivery stored, not run again).
   */
  outcomes: Counter<"outcome">;
  /** Jobs run again on a node after an execution whose end nobody recorded. */
  reexecutions: Counter;
  running: Gauge;
  waiting: Gauge;
  queueDepth: Gauge<"account">;
}

export function createBatchMetrics(registry: Registry): BatchMetrics {
  return {
    outcomes: new Counter({
      name: "zml_batch_jobs_total",
      help: "Batch jobs by outcome (done, failed, expired, retried, dead_lettered, stored_earlier)",
      labelNames: ["outcome"] as const,
      registers: [registry],
    }),
    reexecutions: new Counter({
      name: "zml_batch_job_reexecutions_total",
      help: "Batch jobs run again on a node after an execution whose end nobody recorded (its dispatcher died or stopped mid-run)",
      registers: [registry],
    }),
    running: new Gauge({
      name: "zml_batch_jobs_running",
      help: "Batch jobs running on nodes from this dispatcher",
      registers: [registry],
    }),
    waiting: new Gauge({
      name: "zml_batch_jobs_waiting_capacity",
      help: "Pulled jobs waiting for capacity (at most one per account)",
      registers: [registry],
    }),
    queueDepth: new Gauge({
      name: "zml_batch_queue_depth",
      help: "Jobs queued in JetStream per account (pending plus unacked)",
      labelNames: ["account"] as const,
      registers: [registry],
    }),
  };
}
