import { ensureJobStreams, openOwnedKv } from "@zml/bus";
import type { JobMessage } from "@zml/bus";
import { JOB_MESSAGE_TYPE, JOB_STATUS_BUCKET, ZmlError } from "@zml/contracts";
import { waitUntil } from "@zml/runtime";
import type { AccountSpec } from "@zml/contracts";
import type { Registry } from "@zml/telemetry";
import type { DispatcherConfig } from "../config.ts";
import { executeRoute } from "../route/execute-route.ts";
import type { ExecuteDeps, ExecutionResult } from "../route/execution.ts";
import { readRouteHeaders } from "../route/route-headers.ts";
import type { RoutedRequest } from "../route/route-headers.ts";
import { startAccountConsumers } from "./account-consumers.ts";
import { createBatchMetrics } from "./batch-metrics.ts";
import { createBatchQueues } from "./batch-queues.ts";
import type { QueuedJob } from "./batch-queues.ts";
import { createCollectingWriter } from "./collecting-writer.ts";
import type { CollectingWriter } from "./collecting-writer.ts";
import { createJobFinisher } from "./finish-job.ts";
import type { JobRef } from "./finish-job.ts";
import { errorOutcome, jobFinishOf, waitsForCapacity } from "./job-outcome.ts";
import { followPeers } from "./peer-liveness.ts";
import { decideRedelivery } from "./redelivery.ts";
import { readStatus, storedOutcome } from "./results.ts";

export interface BatchWorkerDeps extends ExecuteDeps {
  accounts: {
    map: ReadonlyMap<string, AccountSpec>;
    onChange(listener: () => void): () => void;
  };
  registry: Registry;
  /** This replica's id, as its liveness beats name it. */
  replica: string;
  config: ExecuteDeps["config"] &
    Pick<
      DispatcherConfig,
      | "BATCH_MAX_DELIVERIES"
      | "BATCH_RETRY_DELAY_MS"
      | "BATCH_ACK_WAIT_MS"
      | "BATCH_DEFAULT_MAX_QUEUE_MS"
      | "BATCH_JOB_TIMEOUT_MS"
      | "BATCH_WORKER_LOSS_MS"
    >;
}

/** A pulled job waiting for capacity. */
interface Ticket extends JobRef, QueuedJob {
  request: RoutedRequest;
  /** Resolves once the job started (or ended without starting); the account pulls again. */
  release: () => void;
  /** Its run, once started, is a re-execution (an earlier one may have run unrecorded). */
  reexecution: boolean;
  /** Its status names this replica as holding it while it waits for capacity. */
  announcedWaiting: boolean;
}

/** How often deliveries waiting for another replica's run of the same job look again. */
const HELD_RECHECK_MS = 1_000;

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
function handBack(ticket: Pick<JobRef, "msg">): void {
  try {
    ticket.msg.nak();
  } catch {
    // The connection is gone: JetStream redelivers the job after its ack wait anyway.
  }
}

/** An in-progress ack; a connection moving to another server drops it (the next one counts). */
function signalProgress(ticket: Pick<JobRef, "msg">): void {
  try {
    ticket.msg.working();
  } catch {
    // Not connected right now.
  }
}

/**
 * Batch workers: one durable pull consumer per account on the jobs work queue. A job is
 * taken from JetStream only when its account's previous job has started, and started only
 * when routing finds capacity under its policy, so while the fleet is saturated jobs wait
 * in JetStream (at most one per account waits here). Waiting jobs are started in arrival
 * order, which is round-robin between accounts. A job is acked only after its result is
 * stored; the result is stored at most once per job id.
 *
 * A job runs once unless its dispatcher dies. A job JetStream delivers again is looked up
 * first: one whose result is stored (its ack was lost) is acked without running; one whose
 * status names a live replica as holding it (JetStream handed it out again because a leader
 * change lost its in-progress acks) waits, kept alive, for that replica's result; only one
 * nobody holds any more runs, and that run is counted as a re-execution when an earlier one
 * may have run unrecorded.
 */
export async function startBatchWorker(deps: BatchWorkerDeps): Promise<BatchWorker> {
  await ensureJobStreams(deps.bus, { owner: true });
  const statusKv = await openOwnedKv(deps.bus, JOB_STATUS_BUCKET);
  const metrics = createBatchMetrics(deps.registry);
  // Aborted once stop's deadline passed: a result or ack still being retried is given up
  // (the job was handed back).
  const giveUp = new AbortController();
  const { finish, finishFromStored, status } = createJobFinisher({
    ...deps,
    statusKv,
    metrics,
    signal: giveUp.signal,
  });
  const peers = followPeers(deps.bus, {
    self: deps.replica,
    lossAfterMs: deps.config.BATCH_WORKER_LOSS_MS,
    clock: deps.clock,
    log: deps.log,
  });
  const progressEveryMs = deps.config.BATCH_ACK_WAIT_MS / 3;
  /** Waiting, running and held jobs; a running job's timer keeps its delivery alive. */
  const queues = createBatchQueues<Ticket, NodeJS.Timeout>(progressEveryMs);
  let stopped = false;
  let wake: () => void = () => {};
  /** Finishes still being recorded or acked (through a leader change, perhaps). */
  const finishing = new Set<Promise<void>>();
  /** Finishes a job that did not run, off the scheduler (recording may take a while). */
  const finishAside = (ticket: Ticket, outcome: Parameters<typeof finish>[1]) => {
    const done = finish(ticket, outcome).finally(() => {
      finishing.delete(done);
      queues.release(ticket);
    });
    finishing.add(done);
  };

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
      if (!queues.expired(ticket, now, maxQueueMs)) {
        if (!ticket.announcedWaiting) {
          // A delivery made while it waits here (see above) waits for this replica.
          ticket.announcedWaiting = true;
          status(ticket, {
            status: "queued",
            httpStatus: null,
            errorCode: null,
            attempts: 0,
            held: true,
          });
        }
        if (queues.progressDue(ticket, now)) signalProgress(ticket);
        return false;
      }
      metrics.outcomes.inc({ outcome: "expired_wait" });
      finishAside(ticket, jobFinishOf(r, writer.reply(), "expired"));
      return true;
    }
    finishAside(ticket, jobFinishOf(r, writer.reply(), "failed"));
    return true;
  };

  const runToEnd = async (
    ticket: Ticket,
    result: Promise<ExecutionResult>,
    writer: CollectingWriter,
  ) => {
    metrics.running.inc();
    const deliveries = ticket.msg.info.deliveryCount;
    if (ticket.reexecution) {
      metrics.reexecutions.inc();
      ticket.reexecutions += 1;
    }
    deps.log.info(
      {
        job_id: ticket.jobId,
        account: ticket.account,
        deliveries,
        ...(ticket.reexecution ? { reexecution: ticket.reexecutions } : {}),
      },
      "batch job started",
    );
    status(ticket, {
      status: "running",
      httpStatus: null,
      errorCode: null,
      attempts: 0,
      held: true,
    });
    // Long jobs tell JetStream they are alive so it does not redeliver them meanwhile.
    const progress = setInterval(() => signalProgress(ticket), progressEveryMs);
    queues.startRunning(ticket, progress);
    try {
      const outcome = jobFinishOf(await result, writer.reply(), "failed");
      // Handed back on stop: the next delivery records the result.
      if (queues.isRunning(ticket)) await finish(ticket, outcome);
    } finally {
      clearInterval(progress);
      queues.endRun(ticket);
      metrics.running.dec();
    }
  };

  /**
   * Looks up a job delivered again: finishes it from its stored result, leaves it waiting
   * for the live replica that holds it, or marks it to run. Lookups that fail (a leader
   * change) leave it waiting, to look again shortly.
   */
  const judge = async (ticket: Ticket): Promise<"finished" | "wait" | "run"> => {
    let stored: Awaited<ReturnType<typeof storedOutcome>>;
    let current: Awaited<ReturnType<typeof readStatus>>;
    try {
      [stored, current] = await Promise.all([
        storedOutcome(deps.bus, ticket.account, ticket.jobId),
        readStatus(deps.bus, ticket.account, ticket.jobId),
      ]);
    } catch {
      return "wait";
    }
    const decision = decideRedelivery({
      deliveryCount: ticket.msg.info.deliveryCount,
      stored: stored !== null,
      status: current,
      self: deps.replica,
      heldHere: queues.heldHereByAnother(ticket),
      alive: (replica) => peers.alive(replica),
      now: deps.clock(),
      // Longer than a holder may wait for capacity and then run.
      maxHoldMs: deps.config.BATCH_DEFAULT_MAX_QUEUE_MS + deps.config.BATCH_JOB_TIMEOUT_MS,
    });
    ticket.reexecutions = current?.reexecutions ?? 0;
    if (decision.kind === "stored") {
      if (!stored) return "wait";
      deps.log.info(
        {
          job_id: ticket.jobId,
          account: ticket.account,
          deliveries: ticket.msg.info.deliveryCount,
        },
        "batch job delivered again; its result is stored, not run again",
      );
      const done = finishFromStored(ticket, stored, current).finally(() => finishing.delete(done));
      finishing.add(done);
      return "finished";
    }
    if (decision.kind === "wait") return "wait";
    ticket.reexecution = decision.reexecution;
    return "run";
  };

  /** Queues a ticket for capacity; resolves once it started or ended without starting. */
  const enqueue = (ticket: Ticket): Promise<void> => {
    const released = new Promise<void>((r) => (ticket.release = r));
    queues.enqueue(ticket);
    wake();
    return released;
  };

  const hold = (ticket: Ticket) => {
    if (queues.hold(ticket)) {
      deps.log.info(
        {
          job_id: ticket.jobId,
          account: ticket.account,
          deliveries: ticket.msg.info.deliveryCount,
        },
        "batch job delivered again while held elsewhere; waiting for that run",
      );
    }
  };

  let rechecking = false;
  const recheck = setInterval(() => {
    if (rechecking || stopped) return;
    rechecking = true;
    void (async () => {
      for (const ticket of queues.heldDeliveries()) {
        if (stopped) break;
        if (queues.progressDue(ticket, deps.clock())) signalProgress(ticket);
        const verdict = await judge(ticket);
        if (verdict === "wait" || stopped) continue;
        queues.unhold(ticket);
        if (verdict === "run") void enqueue(ticket);
      }
    })().finally(() => (rechecking = false));
  }, HELD_RECHECK_MS);

  const scheduler = (async () => {
    while (!stopped) {
      for (const ticket of queues.waiting()) {
        if (await tryStart(ticket)) {
          queues.leaveWaiting(ticket);
          ticket.release();
        }
      }
      metrics.waiting.set(queues.waitingCount());
      const woken = new Promise<void>((r) => (wake = r));
      // With jobs waiting, capacity frees on completions and state changes and the timeout
      // paces expiry checks; with none, only a new job wakes the loop (no per-request churn).
      await (queues.waitingCount() > 0 ? Promise.race([deps.capacity.wait(1_000), woken]) : woken);
    }
  })();

  const consumers = await startAccountConsumers({
    ...deps,
    metrics,
    take: async (account, msg) => {
      if (stopped) {
        handBack({ msg });
        return;
      }
      const made = toTicket(account, msg, deps.clock());
      if (!made.ok) {
        await finish(made.job, made.failure);
        return;
      }
      if (msg.info.deliveryCount > 1) {
        const verdict = await judge(made.ticket);
        if (verdict === "finished") return;
        if (verdict === "wait") return hold(made.ticket);
      }
      await enqueue(made.ticket);
    },
  });

  return {
    async stop(deadline) {
      stopped = true;
      consumers.stop();
      clearInterval(recheck);
      wake();
      deps.capacity.notify();
      await scheduler;
      const handedBack = queues.takeWaitingAndHeld();
      for (const ticket of handedBack.waiting) {
        handBack(ticket);
        // Never ran in this delivery: the next one is not a re-execution.
        status(ticket, { status: "queued", httpStatus: null, errorCode: null, attempts: 0 });
        ticket.release();
      }
      for (const ticket of handedBack.held) handBack(ticket);
      await waitUntil(
        () => queues.runningCount() === 0 && finishing.size === 0,
        deadline,
        deps.clock,
      );
      giveUp.abort();
      for (const [ticket, progress] of queues.takeRunning()) {
        clearInterval(progress);
        handBack(ticket);
        deps.log.warn({ job_id: ticket.jobId }, "batch job still running at stop; handed back");
      }
      peers.stop();
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
  const job = { account, jobId, msg, reexecutions: 0 };
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
        reexecution: false,
        announcedWaiting: false,
      },
    };
  } catch (err) {
    const error = err instanceof ZmlError ? err : new ZmlError("invalid_request", "bad job");
    return { ok: false, job, failure: errorOutcome(error, "failed", 0) };
  }
}
