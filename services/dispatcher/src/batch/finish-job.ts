import { confirmAck, isRetryableBusError, publishToStream } from "@zml/bus";
import type { Bus, BusLogger, JobMessage, KV } from "@zml/bus";
import { backoffDelayMs, jobDeadSubject, jobKey } from "@zml/contracts";
import type { JobOutcome, JobStatus } from "@zml/contracts";
import type { DispatcherConfig } from "../config.ts";
import type { BatchMetrics } from "./batch-metrics.ts";
import type { JobFinish } from "./job-outcome.ts";
import { recordResult, storedOutcome, writeStatus } from "./results.ts";
import type { StoredOutcome } from "./results.ts";

/** What finishing a job needs: the message to ack and where its result goes. */
export interface JobRef {
  account: string;
  jobId: string;
  msg: JobMessage;
  /** Re-executions of the job so far, this delivery's run included once it started. */
  reexecutions: number;
}

export interface JobFinisherDeps {
  bus: Bus;
  statusKv: KV;
  metrics: BatchMetrics;
  log: BusLogger;
  /** This replica's id: named in the status of the jobs it holds. */
  replica: string;
  config: Pick<DispatcherConfig, "BATCH_MAX_DELIVERIES" | "BATCH_RETRY_DELAY_MS">;
  /** Aborted when the worker gives its jobs up (its stop deadline passed). */
  signal: AbortSignal;
}

export interface StatusWrite {
  status: JobStatus["status"];
  httpStatus: number | null;
  errorCode: string | null;
  attempts: number;
  /** This replica holds the job (waiting for capacity, or running it). */
  held?: boolean;
}

export type JobStatusWriter = (job: JobRef, write: StatusWrite) => void;

/** One try of an ack confirmation; a leader change is ridden out by trying again. */
const ACK_TRY_TIMEOUT_MS = 2_000;
/** Pauses between tries of a step: doubling from the first to the cap. */
const STEP_RETRY = { firstMs: 200, maxMs: 2_000 };

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/**
 * Ends a job: a retry naks it for redelivery while deliveries remain; otherwise the result
 * is recorded (at most once), then the job is acked. A retry out of deliveries is poison:
 * a copy goes to the dead-letter stream and the job is recorded as failed. Status writes
 * are advisory and never wait.
 *
 * Recording and acking are carried through a stream or consumer leader change: each step
 * is tried again (with in-progress acks between tries, which keep the delivery alive once a
 * leader answers) until it succeeds, fails for good (a refusal), or the worker gives its
 * jobs up. A job that finished is thus never left unacked for JetStream to run again.
 */
export function createJobFinisher(deps: JobFinisherDeps) {
  const status: JobStatusWriter = (job, write) => {
    void writeStatus(deps.statusKv, {
      job_id: job.jobId,
      account: job.account,
      status: write.status,
      http_status: write.httpStatus,
      error_code: write.errorCode,
      attempts: write.attempts,
      // JetStream's count of this delivery.
      deliveries: job.msg.info.deliveryCount,
      reexecutions: job.reexecutions,
      ...(write.held ? { worker: deps.replica } : {}),
      updated_at: Date.now(),
    }).catch(() => undefined);
  };

  /** Runs `step` until it succeeds; throws a refusal, or the last error once given up. */
  const persist = async <T>(job: JobRef, what: string, step: () => Promise<T>): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await step();
      } catch (err) {
        if (!isRetryableBusError(err) || deps.signal.aborted) throw err;
        if (attempt === 1 || attempt % 10 === 0) {
          deps.log.warn(
            { job_id: job.jobId, step: what, attempt, err: String(err) },
            "batch job not finished yet; retrying",
          );
        }
        try {
          job.msg.working();
        } catch {
          // The connection is moving to another server; the next try sends it again.
        }
        await pause(backoffDelayMs(STEP_RETRY, attempt), deps.signal);
      }
    }
  };

  const ack = (job: JobRef) =>
    persist(job, "ack", () => confirmAck(deps.bus, job.msg, ACK_TRY_TIMEOUT_MS));

  const finish = async (job: JobRef, outcome: JobFinish): Promise<void> => {
    const { msg, jobId, account } = job;
    try {
      if (outcome.kind === "retry" && msg.info.deliveryCount < deps.config.BATCH_MAX_DELIVERIES) {
        msg.nak(deps.config.BATCH_RETRY_DELAY_MS);
        deps.metrics.outcomes.inc({ outcome: "retried" });
        status(job, {
          status: "queued",
          httpStatus: outcome.status,
          errorCode: outcome.errorCode,
          attempts: outcome.attempts,
        });
        return;
      }
      const final: JobOutcome = outcome.kind === "retry" ? "failed" : outcome.outcome;
      if (outcome.kind === "retry") {
        // Poison: bounded deliveries all failed. Keep a copy for inspection (one, however
        // often the publish is tried: the dead-letter stream dedupes by job).
        await persist(job, "dead-letter", () =>
          publishToStream(deps.bus, jobDeadSubject(account, jobId), msg.data, {
            ...(msg.headers ? { headers: msg.headers } : {}),
            msgId: jobKey(account, jobId),
          }),
        );
        deps.metrics.outcomes.inc({ outcome: "dead_lettered" });
      }
      // A try whose answer was lost stored the result: the next try is deduplicated by the
      // result's message id, or finds the subject taken, and is not a second record.
      const recorded = await persist(job, "result", () =>
        recordResult(deps.bus, {
          account,
          jobId,
          outcome: final,
          status: outcome.status,
          routing: outcome.routing,
          contentType: outcome.contentType,
          body: outcome.body,
        }),
      );
      await ack(job);
      if (recorded) {
        deps.metrics.outcomes.inc({ outcome: final });
        status(job, {
          status: final,
          httpStatus: outcome.status,
          errorCode: outcome.errorCode,
          attempts: outcome.attempts,
        });
      } else {
        // Another delivery stored the result first (the job id was submitted again after
        // the dedupe window, or raced this one): the status reports the record.
        deps.metrics.outcomes.inc({ outcome: "stored_earlier" });
        const stored = await storedOutcome(deps.bus, account, jobId).catch(() => null);
        if (stored) {
          status(job, {
            status: stored.outcome,
            httpStatus: stored.status,
            errorCode: null,
            attempts: outcome.attempts,
          });
        }
      }
    } catch (err) {
      // Left unacked: JetStream delivers it again after the ack wait, and that delivery
      // finds the result if it was stored.
      deps.log.error({ job_id: jobId, err: String(err) }, "batch job not finalised");
    }
  };

  /**
   * Ends a job whose result an earlier delivery stored: acks it without running it. The
   * status is written only when it does not show an end yet (its final write was lost).
   */
  const finishFromStored = async (
    job: JobRef,
    stored: StoredOutcome,
    current: JobStatus | undefined,
  ): Promise<void> => {
    try {
      await ack(job);
      deps.metrics.outcomes.inc({ outcome: "stored_earlier" });
      if (current?.status !== stored.outcome) {
        status(job, {
          status: stored.outcome,
          httpStatus: stored.status,
          errorCode: current?.error_code ?? null,
          attempts: current?.attempts ?? 0,
        });
      }
    } catch (err) {
      deps.log.error({ job_id: job.jobId, err: String(err) }, "batch job not finalised");
    }
  };
  return { finish, finishFromStored, status };
}
