import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/nats-core";
import { ensureJobStreams, openKv } from "@zml/bus";
import type { KV } from "@zml/bus";
import {
  JOB_MESSAGE_TYPE,
  JOB_STATUS_BUCKET,
  JOB_STREAMS,
  ZmlError,
  accountJobsFilter,
  jobDeadSubject,
} from "@zml/contracts";
import type { AccountSpec, JobOutcome } from "@zml/contracts";
import { Counter, Gauge } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";
import type { CapacitySignal } from "../capacity-signal.ts";
import type { DispatcherConfig } from "../config.ts";
import { executeRoute } from "../execute-route.ts";
import type { ExecuteDeps, ExecutionResult } from "../execute-route.ts";
import { readRouteRequest } from "../route-request.ts";
import type { RouteRequest } from "../route-request.ts";
import { createCollectingWriter } from "./collecting-writer.ts";
import { recordResult, writeStatus } from "./results.ts";

export interface BatchWorkerDeps extends ExecuteDeps {
  capacity: CapacitySignal;
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

/** What finishing a job needs: the message to ack and where its result goes. */
type JobRef = Pick<Ticket, "account" | "jobId" | "msg">;

/** A pulled job waiting for capacity. */
interface Ticket {
  account: string;
  jobId: string;
  msg: JsMsg;
  request: RouteRequest;
  submittedAt: number;
  lastProgressAt: number;
  /** Resolves once the job started (or ended without starting); the account pulls again. */
  release: () => void;
}

const NEVER = new AbortController().signal;

/**
 * Batch workers: one durable pull consumer per account on the jobs work queue. A job is
 * taken from JetStream only when its account's previous job has started, and started only
 * when routing finds capacity under its policy, so while the fleet is saturated jobs wait
 * in JetStream (at most one per account waits here). Waiting jobs are started in arrival
 * order, which is round-robin between accounts. A job is acked only after its result is
 * stored; the result is stored at most once per job id.
 */
export async function startBatchWorker(deps: BatchWorkerDeps): Promise<{ stop(): Promise<void> }> {
  await ensureJobStreams(deps.bus);
  const jsm = await jetstreamManager(deps.bus.nc);
  const js = jetstream(deps.bus.nc);
  const statusKv = await openKv(deps.bus, JOB_STATUS_BUCKET);
  const metrics = createBatchMetrics(deps.registry);
  const waiting: Ticket[] = [];
  const loops = new Map<string, { stop: () => void }>();
  let stopped = false;
  let wake: () => void = () => {};
  const progressEveryMs = deps.config.BATCH_ACK_WAIT_MS / 3;

  const finish = async (ticket: JobRef, outcome: Finished) => {
    const { msg, jobId, account } = ticket;
    try {
      if (outcome.kind === "retry" && msg.info.deliveryCount < deps.config.BATCH_MAX_DELIVERIES) {
        msg.nak(deps.config.BATCH_RETRY_DELAY_MS);
        metrics.outcomes.inc({ outcome: "retried" });
        void writeStatusSafe(
          statusKv,
          ticket,
          "queued",
          outcome.status,
          outcome.errorCode,
          outcome.attempts,
        );
        return;
      }
      const final: JobOutcome = outcome.kind === "retry" ? "failed" : outcome.outcome;
      if (outcome.kind === "retry") {
        // Poison: bounded deliveries all failed. Keep a copy for inspection.
        await js.publish(jobDeadSubject(account, jobId), msg.data, { headers: msg.headers });
        metrics.outcomes.inc({ outcome: "dead_lettered" });
      }
      const recorded = await recordResult(js, {
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
        metrics.outcomes.inc({ outcome: final });
        void writeStatusSafe(
          statusKv,
          ticket,
          final,
          outcome.status,
          outcome.errorCode,
          outcome.attempts,
        );
      }
    } catch (err) {
      // The job stays unacked and comes back after the ack wait; its result is fenced.
      deps.log.error({ job_id: jobId, err: String(err) }, "batch job not finalised");
    }
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
      if (now - ticket.submittedAt < maxQueueMs) {
        if (now - ticket.lastProgressAt >= progressEveryMs) {
          ticket.msg.working();
          ticket.lastProgressAt = now;
        }
        return false;
      }
      metrics.outcomes.inc({ outcome: "expired_wait" });
      await finish(ticket, toFinished(r, writer.reply(), "expired"));
      return true;
    }
    await finish(ticket, toFinished(r, writer.reply(), "failed"));
    return true;
  };

  const runToEnd = async (
    ticket: Ticket,
    result: Promise<ExecutionResult>,
    writer: ReturnType<typeof createCollectingWriter>,
  ) => {
    metrics.running.inc();
    void writeStatusSafe(statusKv, ticket, "running", null, null, 0);
    // Long jobs tell JetStream they are alive so it does not redeliver them meanwhile.
    const progress = setInterval(() => ticket.msg.working(), progressEveryMs);
    try {
      await finish(ticket, toFinished(await result, writer.reply(), "failed"));
    } finally {
      clearInterval(progress);
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

  const consumeAccount = async (account: string, consumer: Consumer, isStopped: () => boolean) => {
    while (!stopped && !isStopped()) {
      let msg: JsMsg | null;
      try {
        msg = await consumer.next({ expires: 5_000 });
      } catch (err) {
        deps.log.warn({ account, err: String(err) }, "job pull failed; retrying");
        await new Promise((r) => setTimeout(r, 1_000));
        continue;
      }
      if (!msg) continue;
      const ticket = toTicket(account, msg, deps.clock());
      if (!ticket.ok) {
        await finish(ticket.stub, ticket.failure);
        continue;
      }
      const released = new Promise<void>((r) => (ticket.ticket.release = r));
      waiting.push(ticket.ticket);
      wake();
      await released;
    }
  };

  const syncAccounts = async () => {
    for (const [account, loop] of loops) {
      if (!deps.accounts.map.has(account)) {
        loop.stop();
        loops.delete(account);
      }
    }
    for (const account of deps.accounts.map.keys()) {
      if (loops.has(account)) continue;
      let accountStopped = false;
      loops.set(account, { stop: () => (accountStopped = true) });
      const durable = `zml-batch-${account}`;
      await jsm.consumers.add(JOB_STREAMS.jobs, {
        durable_name: durable,
        filter_subject: accountJobsFilter(account),
        ack_policy: AckPolicy.Explicit,
        ack_wait: nanos(deps.config.BATCH_ACK_WAIT_MS),
        max_deliver: deps.config.BATCH_MAX_DELIVERIES + 1,
      });
      const consumer = await js.consumers.get(JOB_STREAMS.jobs, durable);
      void consumeAccount(account, consumer, () => accountStopped);
    }
  };
  await syncAccounts();
  const unsubscribe = deps.accounts.onChange(() => {
    syncAccounts().catch((err: unknown) =>
      deps.log.error({ err: String(err) }, "batch consumers not updated"),
    );
  });
  const depthTimer = setInterval(() => {
    void (async () => {
      for (const account of loops.keys()) {
        const info = await jsm.consumers
          .info(JOB_STREAMS.jobs, `zml-batch-${account}`)
          .catch(() => null);
        if (info) metrics.queueDepth.set({ account }, info.num_pending + info.num_ack_pending);
      }
    })();
  }, 5_000);

  return {
    async stop() {
      stopped = true;
      unsubscribe();
      clearInterval(depthTimer);
      for (const loop of loops.values()) loop.stop();
      wake();
      deps.capacity.notify();
      await scheduler;
    },
  };

  function toTicket(
    account: string,
    msg: JsMsg,
    now: number,
  ): { ok: true; ticket: Ticket } | { ok: false; stub: JobRef; failure: Finished } {
    const jobId = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
    const submittedAt = Math.floor(Number(msg.info.timestampNanos) / 1e6);
    const base = { account, jobId, msg, submittedAt, lastProgressAt: now, release: () => {} };
    try {
      const request = readRouteRequest(msg.headers, now, JOB_MESSAGE_TYPE);
      return { ok: true, ticket: { ...base, request: { ...request, requestId: jobId } } };
    } catch (err) {
      const error = err instanceof ZmlError ? err : new ZmlError("invalid_request", "bad job");
      return {
        ok: false,
        stub: base,
        failure: errorFinished(error, "failed", 0),
      };
    }
  }
}

type Finished =
  | {
      kind: "final";
      outcome: JobOutcome;
      status: number;
      routing: string;
      contentType: string;
      body: Uint8Array;
      errorCode: string | null;
      attempts: number;
    }
  | {
      kind: "retry";
      status: number;
      routing: string;
      contentType: string;
      body: Uint8Array;
      errorCode: string | null;
      attempts: number;
    };

/** No capacity now, or no usable node now: the job waits, up to its policy's limit. */
function waitsForCapacity(error: ZmlError): boolean {
  return error.code === "saturated" || error.code === "no_node_available";
}

function toFinished(
  r: ExecutionResult,
  reply: ReturnType<ReturnType<typeof createCollectingWriter>["reply"]>,
  rejectedAs: JobOutcome,
): Finished {
  const body = Buffer.concat(reply.chunks);
  if (r.kind === "relayed") {
    const ok = r.status >= 200 && r.status < 300;
    return {
      kind: "final",
      outcome: ok ? "done" : "failed",
      status: r.status,
      routing: r.routing,
      contentType: reply.contentType,
      body,
      errorCode: ok ? null : `http_${r.status}`,
      attempts: r.attempts,
    };
  }
  if (r.kind === "broken" || r.kind === "failed") {
    // Nothing reached a client: a broken stream or exhausted attempts may succeed later.
    const error =
      r.kind === "failed" ? r.error : new ZmlError("stream_interrupted", "stream broke");
    return { ...errorFinished(error, "failed", r.attempts), kind: "retry" };
  }
  if (r.kind === "rejected") return errorFinished(r.error, rejectedAs, 0);
  return errorFinished(new ZmlError("internal_error", "job cancelled"), "failed", 0);
}

function errorFinished(
  error: ZmlError,
  outcome: JobOutcome,
  attempts: number,
): Finished & { kind: "final" } {
  return {
    kind: "final",
    outcome,
    status: error.status,
    routing: "",
    contentType: "application/json",
    body: Buffer.from(JSON.stringify(error.toBody())),
    errorCode: error.code,
    attempts,
  };
}

async function writeStatusSafe(
  kv: KV,
  ticket: Pick<Ticket, "jobId" | "account">,
  status: "queued" | "running" | JobOutcome,
  httpStatus: number | null,
  errorCode: string | null,
  attempts: number,
): Promise<void> {
  await writeStatus(kv, {
    job_id: ticket.jobId,
    account: ticket.account,
    status,
    http_status: httpStatus,
    error_code: errorCode,
    attempts,
    updated_at: Date.now(),
  }).catch(() => undefined);
}

function createBatchMetrics(registry: Registry) {
  return {
    outcomes: new Counter({
      name: "zml_batch_jobs_total",
      help: "Batch jobs by outcome (done, failed, expired, retried, dead_lettered)",
      labelNames: ["outcome"] as const,
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
