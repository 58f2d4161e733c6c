import { jetstream } from "@nats-io/jetstream";
import { createHeaders, natsConnectionOf, openKv, publishJson } from "@zml/bus";
import {
  DISPATCHER_ALIVE_SUBJECT,
  DispatcherAliveSchema,
  HEADERS,
  JOB_HEADERS,
  JOB_STATUS_BUCKET,
  JOB_STREAMS,
  jobKey,
  jobResultSubject,
} from "@zml/contracts";
import type { PolicySpec } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readResults, submitJob } from "../support/jobs.ts";
import { authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const policy = (name: string, extra: Partial<PolicySpec> = {}): PolicySpec =>
  chainPolicy(name, ["H100"], {
    cost_priority: "cost",
    queue_on_saturation: true,
    max_queue_ms: 600_000,
    ...extra,
  });

let stack: Stack;
const BATCH = "batch-m";

beforeAll(async () => {
  stack = await startStack({
    nodes: [
      { nodeId: "b-1", family: "H100", models: [BATCH], maxConcurrency: 4, ttftMs: 15 },
      { nodeId: "b-2", family: "H100", models: [BATCH], maxConcurrency: 4, ttftMs: 15 },
      { nodeId: "b-bad", family: "H100", models: ["bad-m"], maxConcurrency: 4 },
      { nodeId: "b-down", family: "H100", models: ["down-m"], maxConcurrency: 4 },
    ],
    fleet: {
      models: [
        { id: BATCH, default_policy: "batch" },
        { id: "bad-m", default_policy: "batch" },
        { id: "down-m", default_policy: "short-wait" },
      ],
      policies: [policy("batch"), policy("short-wait", { max_queue_ms: 1_000 })],
    },
    env: { BATCH_RETRY_DELAY_MS: "200" },
  });
  stack.sims.get("b-down")!.setFault({ kind: "health_fail" });
  await waitForStatus(stack, "Active", ["b-1", "b-2", "b-bad"]);
  await waitForStatus(stack, "Degraded", ["b-down"]);
  const second = { id: "acct-b", api_key_sha256: [], allowed_tiers: [1] };
  await stack.apply({ ...stack.fleet, accounts: [...stack.fleet.accounts, second] });
});
afterAll(() => stack?.stop());

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe("batch jobs on JetStream", () => {
  it("runs the same job id only once", async () => {
    expect(await submitJob(stack.bus, "e2e", "dup-1", BATCH)).toEqual({ duplicate: false });
    expect(await submitJob(stack.bus, "e2e", "dup-1", BATCH)).toEqual({ duplicate: true });
    await pollUntil(async () => (await readResults(stack.bus)).some((r) => r.jobId === "dup-1"));
    const results = (await readResults(stack.bus)).filter((r) => r.jobId === "dup-1");
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ outcome: "done", status: 200 });
    expect(JSON.parse(results[0]!.body).object).toBe("chat.completion");
  });

  it("reports the stored result in the status of a job run again after an earlier delivery stored it", async () => {
    // As left by a delivery that stored its result and died before its ack: the result is
    // there, the job is delivered (again), runs, and cannot store a second result.
    const h = createHeaders();
    h.set(JOB_HEADERS.jobId, "stored-1");
    h.set(JOB_HEADERS.outcome, "done");
    h.set(HEADERS.status, "200");
    await jetstream(natsConnectionOf(stack.bus)).publish(
      jobResultSubject("e2e", "stored-1"),
      '{"object":"chat.completion"}',
      { headers: h },
    );
    await submitJob(stack.bus, "e2e", "stored-1", BATCH);
    const status = await pollUntil(
      async () => {
        const res = await fetch(`${stack.intakeUrl}/v1/jobs/stored-1`, { headers: authHeaders() });
        const body = (await res.json()) as { status?: string; attempts?: number };
        return body.status === "done" && (body.attempts ?? 0) >= 1 ? body : undefined;
      },
      { timeoutMs: 15_000, message: "the job's status to report the stored result" },
    );
    expect(status).toMatchObject({ status: "done" });
    expect((await readResults(stack.bus)).filter((r) => r.jobId === "stored-1")).toHaveLength(1);
  });

  it("shows a finished job from its stored result when its status record is missing", async () => {
    // As left by a delivery whose status writes were lost in a failover (they are not
    // retried): the result, the record, is stored and the job is gone from the work queue.
    const h = createHeaders();
    h.set(JOB_HEADERS.jobId, "no-status-1");
    h.set(JOB_HEADERS.outcome, "failed");
    h.set(HEADERS.status, "400");
    h.set(
      HEADERS.routing,
      'decision-id="d-1", node="b-1", policy="batch", family="H100", queue-depth=0, tier=1, attempts=2',
    );
    await jetstream(natsConnectionOf(stack.bus)).publish(
      jobResultSubject("e2e", "no-status-1"),
      '{"error":{"code":"invalid_request"}}',
      { headers: h },
    );
    const res = await fetch(`${stack.intakeUrl}/v1/jobs/no-status-1`, { headers: authHeaders() });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      job_id: "no-status-1",
      status: "failed",
      attempts: 2,
      deliveries: 1,
      result: { outcome: "failed", http_status: 400, body: { error: { code: "invalid_request" } } },
    });
    // Its status stuck at `running` (the final write lost): the result says how it ended.
    const kv = await openKv(stack.bus, JOB_STATUS_BUCKET);
    await kv.put(
      jobKey("e2e", "no-status-1"),
      JSON.stringify({
        type: "job.status.v1",
        job_id: "no-status-1",
        account: "e2e",
        status: "running",
        http_status: null,
        error_code: null,
        attempts: 1,
        deliveries: 2,
        updated_at: Date.now(),
      }),
    );
    const stuck = await fetch(`${stack.intakeUrl}/v1/jobs/no-status-1`, { headers: authHeaders() });
    expect(await stuck.json()).toMatchObject({ status: "failed", attempts: 2, deliveries: 2 });
    // A job with neither status, result nor queued message is still unknown.
    const unknown = await fetch(`${stack.intakeUrl}/v1/jobs/never-sent-1`, {
      headers: authHeaders(),
    });
    expect(unknown.status).toBe(404);
  });

  it("does not run again a job delivered again whose result is stored, waits while a live replica holds one, and runs one whose holder died as a counted re-execution", async () => {
    // As a dispatcher that lost its ack, or died, leaves jobs: delivered once already.
    await stack.stopService("dispatcher");
    const nc = natsConnectionOf(stack.bus);
    const [stored, held, orphaned] = ["again-stored", "again-held", "again-orphaned"];
    for (const id of [stored, held, orphaned]) await submitJob(stack.bus, "e2e", id, BATCH);
    const consumer = await jetstream(nc).consumers.get(JOB_STREAMS.jobs, "zml-batch-e2e");
    const pulled = [];
    for await (const msg of await consumer.fetch({ max_messages: 3, expires: 5_000 })) {
      pulled.push(msg);
      if (pulled.length === 3) break;
    }
    expect(pulled.map((m) => m.subject.slice(m.subject.lastIndexOf(".") + 1)).sort()).toEqual(
      [stored, held, orphaned].sort(),
    );
    for (const msg of pulled) msg.nak(); // each to be delivered again, to the next puller
    const h = createHeaders();
    h.set(JOB_HEADERS.jobId, stored);
    h.set(JOB_HEADERS.outcome, "done");
    h.set(HEADERS.status, "200");
    await jetstream(nc).publish(jobResultSubject("e2e", stored), '{"object":"chat.completion"}', {
      headers: h,
    });
    const kv = await openKv(stack.bus, JOB_STATUS_BUCKET);
    const running = (id: string, worker: string) =>
      kv.put(
        jobKey("e2e", id),
        JSON.stringify({
          type: "job.status.v1",
          job_id: id,
          account: "e2e",
          status: "running",
          http_status: null,
          error_code: null,
          attempts: 0,
          deliveries: 1,
          worker,
          updated_at: Date.now(),
        }),
      );
    await running(held, "ghost-alive");
    await running(orphaned, "ghost-dead");
    const beat = () =>
      publishJson(stack.bus, DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema, {
        type: "dispatcher.alive.v1",
        replica: "ghost-alive",
        interval_ms: 250,
      });
    beat();
    const beats = setInterval(beat, 250);
    const nodes = ["b-1", "b-2"].map((id) => stack.sims.get(id)!);
    const payloads = () => nodes.reduce((n, sim) => n + sim.stats().payloads_received, 0);
    const before = payloads();
    const view = async (id: string) =>
      (await (
        await fetch(`${stack.intakeUrl}/v1/jobs/${id}`, { headers: authHeaders() })
      ).json()) as { status?: string; reexecutions?: number };
    try {
      await stack.startService("dispatcher");
      const dispatcher = stack.services.get("dispatcher")!;
      await dispatcher.waitForOutput(/"job_id":"again-stored".*its result is stored/, 10_000);
      await dispatcher.waitForOutput(/"job_id":"again-held".*held elsewhere/, 10_000);
      // The orphan's holder never beats: it runs once this dispatcher has waited its loss
      // bound (it gives replicas it never heard of that long), as a re-execution.
      await pollUntil(async () => (await view(orphaned)).status === "done", { timeoutMs: 15_000 });
      expect(await view(orphaned)).toMatchObject({ status: "done", reexecutions: 1 });
      expect(payloads() - before).toBe(1);
      expect(await view(stored)).toMatchObject({ status: "done", reexecutions: 0 });
      expect((await view(held)).status).toBe("running");
    } finally {
      clearInterval(beats);
    }
    // Its holder falls silent: the held job runs, a re-execution too.
    await pollUntil(async () => (await view(held)).status === "done", { timeoutMs: 15_000 });
    expect(await view(held)).toMatchObject({ status: "done", reexecutions: 1 });
    expect(payloads() - before).toBe(2);
    const results = await readResults(stack.bus);
    for (const id of [stored, held, orphaned]) {
      expect(results.filter((r) => r.jobId === id)).toHaveLength(1);
    }
  });

  it("fails a job whose node answers 400, without retry", async () => {
    const bad = stack.sims.get("b-bad")!;
    bad.setFault({ kind: "status", status: 400 });
    await submitJob(stack.bus, "e2e", "bad-1", "bad-m");
    const result = await pollUntil(async () =>
      (await readResults(stack.bus)).find((r) => r.jobId === "bad-1"),
    );
    expect(result).toMatchObject({ outcome: "failed", status: 400 });
    expect(bad.stats().payloads_received).toBe(1);
  });

  it("gives a job that waits past max_queue_ms on a saturated fleet a saturation result", async () => {
    const startedAt = Date.now();
    await submitJob(stack.bus, "e2e", "late-1", "down-m");
    const result = await pollUntil(
      async () => (await readResults(stack.bus)).find((r) => r.jobId === "late-1"),
      { timeoutMs: 15_000 },
    );
    expect(result, JSON.stringify(result)).toMatchObject({ outcome: "expired", status: 503 });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1_000);
    expect(stack.sims.get("b-down")!.stats().payloads_received).toBe(0);
  });

  it("completes 1,000 jobs on a fleet of capacity 8 without exceeding it, across a dispatcher and a nats-server restart", async () => {
    let maxInFlight = 0;
    const watch = setInterval(() => {
      const inFlight = ["b-1", "b-2"].map((id) => stack.sims.get(id)!.stats().in_flight);
      maxInFlight = Math.max(maxInFlight, ...inFlight);
    }, 5);
    try {
      const jobs = [
        ...ids("a", 500).map((id) => ["e2e", id]),
        ...ids("b", 500).map((id) => ["acct-b", id]),
      ];
      for (const [account, id] of jobs) await submitJob(stack.bus, account!, id!, BATCH);

      // Both accounts progress although account a's 500 jobs were queued first.
      await pollUntil(
        async () => {
          const done = await readResults(stack.bus);
          return (
            done.filter((r) => r.jobId.startsWith("a-")).length >= 20 &&
            done.filter((r) => r.jobId.startsWith("b-")).length >= 20
          );
        },
        { timeoutMs: 60_000, message: "both accounts progressing" },
      );

      // Kill a dispatcher mid-run (no drain) and start it again.
      const dispatcher = stack.services.get("dispatcher")!;
      await dispatcher.kill();
      await stack.startService("dispatcher");
      await pollUntil(async () => (await readResults(stack.bus)).length >= 600, {
        timeoutMs: 90_000,
        message: "600 results",
      });
      await stack.nats.restart();

      const results = await pollUntil(
        async () => {
          const all = await readResults(stack.bus).catch(() => []);
          const batch = all.filter((r) => /^[ab]-/.test(r.jobId));
          return new Set(batch.map((r) => r.jobId)).size >= 1_000 ? batch : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500, message: "1000 results" },
      );
      expect(results).toHaveLength(1_000); // each job recorded exactly once
      expect(results.every((r) => r.outcome === "done" && r.status === 200)).toBe(true);
      expect(maxInFlight).toBeLessThanOrEqual(4);
    } finally {
      clearInterval(watch);
    }
  }, 300_000);
});
