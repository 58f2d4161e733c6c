import { publishToStream } from "@zml/bus";
import type { Bus, BusLogger, JobMessage, KV } from "@zml/bus";
import { jobDeadSubject } from "@zml/contracts";
import type { JobOutcome } from "@zml/contracts";
import type { DispatcherConfig } from "../config.ts";
import type { BatchMetrics } from "./batch-metrics.ts";
import type { JobFinish } from "./job-outcome.ts";
import { recordResult, storedOutcome, writeStatus } from "./results.ts";

/** What finishing a job needs: the message to ack and where its result goes. */
export interface JobRef {
  account: string;
  jobId: string;
  msg: JobMessage;
}

export interface JobFinisherDeps {
  bus: Bus;
  statusKv: KV;
  metrics: BatchMetrics;
  log: BusLogger;
  config: Pick<DispatcherConfig, "BATCH_MAX_DELIVERIES" | "BATCH_RETRY_DELAY_MS">;
}

export type JobStatusWriter = (
  job: JobRef,
  status: "queued" | "running" | JobOutcome,
  httpStatus: number | null,
  errorCode: string | null,
  attempts: number,
) => void;

/**
 * Ends a job: a retry naks it for redelivery while deliveries remain; otherwise the result
 * is recorded (at most once), then the job is acked. A retry out of deliveries is poison:
 * a copy goes to the dead-letter stream and the job is recorded as failed. Status writes
 * are advisory and never wait.
 */
export function createJobFinisher(deps: JobFinisherDeps) {
  const status: JobStatusWriter = (job, value, httpStatus, errorCode, attempts) => {
    void writeStatus(deps.statusKv, {
      job_id: job.jobId,
      account: job.account,
      status: value,
      http_status: httpStatus,
      error_code: errorCode,
      attempts,
      // JetStream's count, so a job that ran again (its dispatcher died mid-run) says so.
      deliveries: job.msg.info.deliveryCount,
      updated_at: Date.now(),
    }).catch(() => undefined);
  };

  const finish = async (job: JobRef, outcome: JobFinish): Promise<void> => {
    const { msg, jobId, account } = job;
    try {
      if (outcome.kind === "retry" && msg.info.deliveryCount < deps.config.BATCH_MAX_DELIVERIES) {
        msg.nak(deps.config.BATCH_RETRY_DELAY_MS);
        deps.metrics.outcomes.inc({ outcome: "retried" });
        status(job, "queued", outcome.status, outcome.errorCode, outcome.attempts);
        return;
      }
      const final: JobOutcome = outcome.kind === "retry" ? "failed" : outcome.outcome;
      if (outcome.kind === "retry") {
        // Poison: bounded deliveries all failed. Keep a copy for inspection.
        await publishToStream(
          deps.bus,
          jobDeadSubject(account, jobId),
          msg.data,
          msg.headers ? { headers: msg.headers } : {},
        );
        deps.metrics.outcomes.inc({ outcome: "dead_lettered" });
      }
      const recorded = await recordResult(deps.bus, {
        account,
        jobId,
        outcome: final,
        status: outcome.status,
        routing: outcome.routing,
        contentType: outcome.contentType,
        body: outcome.body,
      });
      await msg.ackAck();
      if (recorded) {
        deps.metrics.outcomes.inc({ outcome: final });
        status(job, final, outcome.status, outcome.errorCode, outcome.attempts);
      } else {
        // An earlier delivery stored the result, then lost its ack (its dispatcher or server
        // died): this delivery set the status to running, so it now reports the stored one.
        const stored = await storedOutcome(deps.bus, account, jobId);
        if (stored) status(job, stored.outcome, stored.status, null, outcome.attempts);
      }
    } catch (err) {
      // The job stays unacked and comes back after the ack wait; its result is fenced.
      deps.log.error({ job_id: jobId, err: String(err) }, "batch job not finalised");
    }
  };
  return { finish, status };
}
