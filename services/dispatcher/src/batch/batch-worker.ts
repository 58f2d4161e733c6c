import { ensureJobStreams, openOwnedKv } from "@zml/bus";
import type { JobMessage } from "@zml/bus";
import { JOB_MESSAGE_TYPE, JOB_STATUS_BUCKET, ZmlError } from "@zml/contracts";
import { waitUntil } from "@zml/runtime";
import type { AccountSpec } from "@zml/contracts";
import type { Registry } from "@zml/telemetry";
import type { DispatcherConfig } from "../config.ts";
import { executeRoute } from "../execute-route.ts";
import type { ExecuteDeps, ExecutionResult } from "../execute-route.ts";
import { readRouteHeaders } from "../route-headers.ts";
import type { RoutedRequest } from "../route-headers.ts";
import { startAccountConsumers } from "./account-consumers.ts";
import { createBatchMetrics } from "./batch-metrics.ts";
import { createCollectingWriter } from "./collecting-writer.ts";
import type { CollectingWriter } from "./collecting-writer.ts";
import { createJobFinisher } from "./finish-job.ts";
import type { JobRef } from "./finish-job.ts";
import { errorOutcome, jobFinishOf, waitsForCapacity } from "./job-outcome.ts";

export interface BatchWorkerDeps extends ExecuteDeps {
  accounts: {
    map: ReadonlyMap<string, AccountSpec>;
    onChange(listener: () => void): () => void;
  };
  registry: Registry;
  config: ExecuteDeps["config"] &
    Pick<
      DispatcherConfig,
      | "BATCH_MAX_DELIVERIES"
      | "BATCH_RETRY_DELAY_MS"
      | "BATCH_ACK_WAIT_MS"
      | "BATCH_DEFAULT_MAX_QUEUE_MS"
      | "BATCH_JOB_TIMEOUT_MS"
    >;
}

/** A pulled job waiting for capacity. */
interface Ticket extends JobRef {
  request: RoutedRequest;
  submittedAt: number;
  lastProgressAt: number;
  /** Resolves once the job started (or ended without starting); the account pulls again. */
  release: () => void;
}

const NEVER = new AbortController().signal;

export interface BatchWorker {
  /**
   * Stops pulling; jobs waiting for capacity are handed back at once (nak without delay:
   * another dispatcher takes them now, not after the ack wait); running jobs may finish
   * until `deadline`, and those still running then are handed back the same way.
   */
  stop(deadline: number): Promise<void>;
}

/** Hands a job back to JetStream for immediate redelivery; a closed bus leaves it to the ack wait. */
function handBack(ticket: JobRef): void {
  try {
    ticket.msg.nak();
  } catch {
    // The connection is gone: JetStream redelivers the job after its ack wait anyway.
  }
}

/**
 * Batch workers: one durable pull consumer per account on the jobs work queue. A job is
 * taken from JetStream only when its account's previous job has started, and started only
 * when routing finds capacity under its policy, so while the fleet is saturated jobs wait
 * in JetStream (at most one per account waits here). Waiting jobs are started in arrival
 * order, which is round-robin between accounts. A job is acked only after its result is
 * stored; the result is stored at most once per job id.
 */
export async function startBatchWorker(deps: BatchWorkerDeps): Promise<BatchWorker> {
  await ensureJobStreams(deps.bus, { owner: true });
  const statusKv = await openOwnedKv(deps.bus, JOB_STATUS_BUCKET);
  const metrics = createBatchMetrics(deps.registry);
  const { finish, status } = createJobFinisher({ ...deps, statusKv, metrics });
  const waiting: Ticket[] = [];
  /** Jobs running on a node, with the timer that keeps their delivery alive. */
  const running = new Map<Ticket, NodeJS.Timeout>();
  let stopped = false;
  let wake: () => void = () => {};
  const progressEveryMs = deps.config.BATCH_ACK_WAIT_MS / 3;

  /** Tries to start one waiting job; true when it left the waiting list. */
  const tryStart = async (ticket: Ticket): Promise<boolean> => {
    const now = deps.clock();
    const writer = createCollectingWriter();
    let dispatched = false;
    let onDispatched: () => void = () => {};
    const started = new Promise<void>((r) => (onDispatched = r));
    const result = executeRoute(deps, {
      request: { ...ticket.request, deadline: now + deps.config.BATCH_JOB_TIMEOUT_MS },
      body: ticket.msg.data,
      writer,
      cancelled: NEVER,
      waitForCapacity: false,
      batchJob: true,
      onDispatched: () => {
        dispatched = true;
        onDispatched();
      },
    });
    await Promise.race([result, started]);
    if (dispatched) {
      void runToEnd(ticket, result, writer);
      return true;
    }
    const r = await result;
    if (r.kind === "rejected" && waitsForCapacity(r.error)) {
      const maxQueueMs = r.policy?.queueOnSaturation
        ? r.policy.maxQueueMs
        : deps.config.BATCH_DEFAULT_MAX_QUEUE_MS;
      if (now - ticket.submittedAt < maxQueueMs) {
        if (now - ticket.lastProgressAt >= progressEveryMs) {
          ticket.msg.working();
          ticket.lastProgressAt = now;
        }
        return false;
      }
      metrics.outcomes.inc({ outcome: "expired_wait" });
      await finish(ticket, jobFinishOf(r, writer.reply(), "expired"));
      return true;
    }
    await finish(ticket, jobFinishOf(r, writer.reply(), "failed"));
    return true;
  };

  const runToEnd = async (
    ticket: Ticket,
    result: Promise<ExecutionResult>,
    writer: CollectingWriter,
  ) => {
    metrics.running.inc();
    const deliveries = ticket.msg.info.deliveryCount;
    deps.log.info(
      { job_id: ticket.jobId, account: ticket.account, deliveries },
      "batch job started",
    );
    status(ticket, "running", null, null, 0);
    // Long jobs tell JetStream they are alive so it does not redeliver them meanwhile.
    const progress = setInterval(() => ticket.msg.working(), progressEveryMs);
    running.set(ticket, progress);
    try {
      const outcome = jobFinishOf(await result, writer.reply(), "failed");
      // Handed back on stop: the next delivery records the result.
      if (running.has(ticket)) await finish(ticket, outcome);
    } finally {
      clearInterval(progress);
      running.delete(ticket);
      metrics.running.dec();
    }
  };

  const scheduler = (async () => {
    while (!stopped) {
      for (const ticket of [...waiting]) {
        if (await tryStart(ticket)) {
          waiting.splice(waiting.indexOf(ticket), 1);
          ticket.release();
        }
      }
      metrics.waiting.set(waiting.length);
      const woken = new Promise<void>((r) => (wake = r));
      // With jobs waiting, capacity frees on completions and state changes and the timeout
      // paces expiry checks; with none, only a new job wakes the loop (no per-request churn).
      await (waiting.length > 0 ? Promise.race([deps.capacity.wait(1_000), woken]) : woken);
    }
  })();

  const consumers = await startAccountConsumers({
    ...deps,
    metrics,
    take: async (account, msg) => {
      if (stopped) {
        handBack({ account, jobId: "", msg });
        return;
      }
      const ticket = toTicket(account, msg, deps.clock());
      if (!ticket.ok) {
        await finish(ticket.job, ticket.failure);
        return;
      }
      const released = new Promise<void>((r) => (ticket.ticket.release = r));
      waiting.push(ticket.ticket);
      wake();
      await released;
    },
  });

  return {
    async stop(deadline) {
      stopped = true;
      consumers.stop();
      wake();
      deps.capacity.notify();
      await scheduler;
      for (const ticket of waiting.splice(0)) {
        handBack(ticket);
        ticket.release();
      }
      await waitUntil(() => running.size === 0, deadline, deps.clock);
      for (const [ticket, progress] of running) {
        clearInterval(progress);
        running.delete(ticket);
        handBack(ticket);
        deps.log.warn({ job_id: ticket.jobId }, "batch job still running at stop; handed back");
      }
    },
  };
}

/** A pulled job as a ticket, or the failure to record when its headers are unusable. */
function toTicket(
  account: string,
  msg: JobMessage,
  now: number,
):
  | { ok: true; ticket: Ticket }
  | { ok: false; job: JobRef; failure: ReturnType<typeof errorOutcome> } {
  const jobId = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
  const submittedAt = Math.floor(Number(msg.info.timestampNanos) / 1e6);
  const job = { account, jobId, msg };
  try {
    const request = readRouteHeaders(msg.headers, now, JOB_MESSAGE_TYPE);
    return {
      ok: true,
      ticket: {
        ...job,
        request: { ...request, requestId: jobId },
        submittedAt,
        lastProgressAt: now,
        release: () => {},
      },
    };
  } catch (err) {
    const error = err instanceof ZmlError ? err : new ZmlError("invalid_request", "bad job");
    return { ok: false, job, failure: errorOutcome(error, "failed", 0) };
  }
}
