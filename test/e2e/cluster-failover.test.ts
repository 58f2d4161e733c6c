// The gateway on a 3-node NATS cluster, two replicas of every service, under sync
// and batch load, losing one nats-server, one health aggregator, one dispatcher and one
// intake in turn (SIGKILL each).
import { jetstreamManager } from "@nats-io/jetstream";
import { natsConnectionOf, subscribeJson } from "@zml/bus";
import { JOB_STREAMS, KV_BUCKETS, NODE_STATE_ALL, NodeStateSchema } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { findFreePort, pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startClusterStack } from "../support/cluster-stack.ts";
import type { ClusterStack } from "../support/cluster-stack.ts";
import { postJob } from "../support/http.ts";
import { authHeaders, chatBody, quietLog } from "../support/stack.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const DEGRADING = "c-3";

interface SyncRecord {
  id: string;
  url: string;
  start: number;
  end: number;
  status: number;
}
interface Submission {
  jobId: string;
  intake: string;
  at: number;
  status: number;
  retryAfter: string | null;
}

describe("on a 3-node NATS cluster, two replicas of each service", { timeout: 300_000 }, () => {
  let stack: ClusterStack;
  beforeAll(async () => {
    stack = await startClusterStack({
      nodes: [
        { nodeId: "c-1", family: "H100" },
        { nodeId: "c-2", family: "H100" },
        { nodeId: DEGRADING, family: "H100" },
      ],
      env: { BATCH_RETRY_DELAY_MS: "500" },
    });
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it("loses one nats-server, one aggregator, one dispatcher, one intake: no job lost or stored twice, 503 + Retry-After or success for submissions, sync failures only in flight on what was killed, a dispatcher's requests ended within ~2 s, no request to a Degraded node", async () => {
    const jsm = await jetstreamManager(natsConnectionOf(stack.bus));
    // Every stream and bucket is R3: the loss of any one server loses no state.
    for (const name of [JOB_STREAMS.jobs, JOB_STREAMS.results, `KV_${KV_BUCKETS.nodeState}`]) {
      expect((await jsm.streams.info(name)).config.num_replicas).toBe(3);
    }
    // All nodes Active before the load starts.
    const latest = new Map<string, NodeState>();
    const stateSub = subscribeJson(
      stack.bus,
      NODE_STATE_ALL,
      NodeStateSchema,
      (s) => {
        latest.set(s.node_id, s);
      },
      { log: quietLog },
    );
    await pollUntil(
      () => [...stack.sims.keys()].every((id) => latest.get(id)?.status === "Active"),
      { timeoutMs: 30_000, message: "every node Active" },
    );

    // Load: sync requests across both intakes, and a steady stream of batch jobs.
    let loadOn = true;
    let turn = 0;
    // The intakes a load balancer sends to: a killed one leaves the rotation as it dies.
    let liveIntakes = [...stack.intakeUrls];
    let killedIntake: string | undefined = undefined; // set as it is killed
    let intakeKillAt = Infinity;
    const sync: SyncRecord[] = [];
    const syncWorker = async () => {
      while (loadOn) {
        const n = turn++;
        const url = liveIntakes[n % liveIntakes.length]!;
        const id = `sync-${n}`;
        const start = Date.now();
        let status: number;
        try {
          const res = await fetch(`${url}/v1/chat/completions`, {
            method: "POST",
            headers: { ...authHeaders(), "x-request-id": id },
            body: chatBody(),
            signal: AbortSignal.timeout(30_000),
          });
          await res.text();
          status = res.status;
        } catch {
          status = 0;
        }
        sync.push({ id, url, start, end: Date.now(), status });
      }
    };
    const submissions: Submission[] = [];
    const accepted = new Set<string>();
    const submitOne = async (jobId: string, first: number) => {
      for (let attempt = 0; attempt < 20; attempt++) {
        const intake = liveIntakes[(first + attempt) % liveIntakes.length]!;
        const at = Date.now();
        const { status, retryAfter } = await postJob(intake, jobId);
        submissions.push({ jobId, intake, at, status, retryAfter });
        if (status === 202) {
          accepted.add(jobId);
          return;
        }
        // Lost with a killed intake: sent again elsewhere (the job id makes it idempotent).
        if (status === 0 && intake === killedIntake) continue;
        if (status !== 503) return; // recorded; the assertions below fail on it
        await sleep(Number(retryAfter ?? "1") * 1000);
      }
    };
    const submitted: string[] = [];
    const submitter = async () => {
      const pending: Promise<void>[] = [];
      for (let i = 0; loadOn; i++) {
        const jobId = `cluster-job-${i}`;
        submitted.push(jobId);
        pending.push(submitOne(jobId, i));
        await sleep(150);
      }
      await Promise.all(pending);
    };
    const load = Promise.all([syncWorker(), syncWorker(), syncWorker(), submitter()]);
    await sleep(3_000);

    // 1. SIGKILL the server leading the node-state bucket, and degrade a node meanwhile:
    // its new state reaches the dispatchers through the aggregator's messages.
    const leaderName = (await jsm.streams.info(`KV_${KV_BUCKETS.nodeState}`)).cluster?.leader;
    const victim = stack.cluster.servers.find((s) => s.name === leaderName)!;
    const killAt = Date.now();
    await victim.kill();
    // Until its clients see the socket close, a request may still be sent through it.
    const killNoticedBy = Date.now() + 100;
    stack.sims.get(DEGRADING)!.setFault({ kind: "health_fail" });
    let markedAt: number | undefined;
    await pollUntil(
      () => {
        const s = latest.get(DEGRADING);
        if (s && s.status !== "Active") markedAt ??= Date.now();
        return markedAt;
      },
      { timeoutMs: 30_000, intervalMs: 20, message: `${DEGRADING} marked Degraded` },
    );
    // What had reached it by then (in flight) plus a moment for the message to travel.
    await sleep(1_000);
    const degradedPayloads = stack.sims.get(DEGRADING)!.stats().payloads_received;
    await sleep(Math.max(0, killAt + 8_000 - Date.now()));
    await victim.start();

    // 2. SIGKILL one aggregator: the other takes its nodes over.
    const aggKillAt = Date.now();
    await stack.services.get("health-aggregator-1")!.kill();
    await pollUntil(
      () =>
        [...stack.sims.keys()].every((id) => (latest.get(id)?.checked_at ?? 0) > aggKillAt + 1_000),
      { timeoutMs: 30_000, message: "every node probed again after the aggregator kill" },
    );
    await sleep(2_000);

    // 3. SIGKILL one dispatcher: intake misses its liveness beats within about a second and
    // re-routes what it held (or answers 503 dispatcher_lost), instead of waiting the timeout.
    const dispatcherKillAt = Date.now();
    await stack.services.get("dispatcher-1")!.kill();
    await sleep(4_000);

    // 4. SIGKILL one intake: only the requests it held fail; clients go on with the other.
    killedIntake = stack.intakeUrls[0]!;
    liveIntakes = liveIntakes.filter((u) => u !== killedIntake);
    intakeKillAt = Date.now();
    await stack.services.get("intake-1")!.kill();
    await sleep(3_000);
    loadOn = false;
    await load;

    // Every submission was answered 202, or 503 with Retry-After; every job was accepted.
    const lostWithIntake = (s: Submission) =>
      s.status === 0 && s.intake === killedIntake && s.at <= intakeKillAt;
    const bad = submissions.filter(
      (s) =>
        !(s.status === 202 || (s.status === 503 && s.retryAfter !== null) || lostWithIntake(s)),
    );
    expect(bad).toEqual([]);
    expect([...accepted].sort()).toEqual([...submitted].sort());
    expect(submitted.length).toBeGreaterThan(20);

    // 0 jobs lost: each one finishes; 0 results written twice: one result message per job.
    const deliveries = new Map<string, number>();
    // The jobs not done yet, with what intake says of them (for the failure message).
    const notDone = new Map<string, string>();
    // Jobs that ran again (on the killed dispatcher's, or a lost server's, account).
    const reexecuted = new Set<string>();
    await pollUntil(
      async () => {
        for (const jobId of submitted) {
          if (deliveries.has(jobId)) continue;
          const res = await fetch(`${stack.intakeUrls[1]!}/v1/jobs/${jobId}`, {
            headers: authHeaders(),
          });
          const text = await res.text();
          const body = JSON.parse(text) as {
            status?: string;
            deliveries?: number;
            reexecutions?: number;
          };
          if (res.status === 200 && body.status === "done") {
            deliveries.set(jobId, body.deliveries ?? 0);
            if ((body.reexecutions ?? 0) > 0) reexecuted.add(jobId);
            notDone.delete(jobId);
          } else notDone.set(jobId, `${res.status} ${text.slice(0, 300)}`);
        }
        return notDone.size === 0;
      },
      { timeoutMs: 90_000, intervalMs: 1_000, message: "every job done" },
    ).catch((err: unknown) => {
      const some = [...notDone].slice(0, 5).map(([id, what]) => `${id}: ${what}`);
      throw new Error(`${String(err)}; ${notDone.size} not done, e.g.\n${some.join("\n")}`);
    });
    const results = await jsm.streams.info(JOB_STREAMS.results, { subjects_filter: ">" });
    const perJob = Object.values(results.state.subjects ?? {});
    expect(perJob.length).toBe(submitted.length);
    expect(perJob.filter((n) => n !== 1)).toEqual([]);
    // Every finished job counts at least the delivery that finished it.
    expect([...deliveries.values()].filter((n) => n < 1)).toEqual([]);

    // Sync requests: the only failures are ones in flight on what was killed: at the server
    // kill (sent before its clients could notice it was gone), on the dispatcher, on the intake.
    const failed = sync.filter((r) => r.status !== 200);
    const spans = (r: SyncRecord, at: number) => r.start <= at && r.end >= at;
    const heldByKilledIntake = (r: SyncRecord) => r.url === killedIntake && r.start <= intakeKillAt;
    const summary = JSON.stringify({
      killed: victim.name,
      sync_total: sync.length,
      sync_failed: failed.map((r) => ({ ...r, start: r.start - killAt, end: r.end - killAt })),
      jobs: submitted.length,
      submissions: submissions.length,
      answered_503: submissions.filter((x) => x.status === 503).length,
      lost_with_intake: submissions.filter(lostWithIntake).length,
      jobs_delivered_twice: [...deliveries.values()].filter((n) => n >= 2).length,
      jobs_reexecuted: reexecuted.size,
      dispatcher_kill_failed: failed.filter((r) => spans(r, dispatcherKillAt)).length,
      intake_kill_failed: failed.filter(heldByKilledIntake).length,
      marked_after_ms: (markedAt ?? 0) - killAt,
      degraded_payloads: degradedPayloads,
    });
    // The run's counts, for docs/operations.md and the reader of a CI log.
    process.stdout.write(`cluster-failover: ${summary}\n`);
    // What the services logged about a failed request, to tell where it was lost.
    const traces = failed.map((r) => [
      r.id,
      ...stack
        .logs()
        .split("\n")
        .filter((l) => l.includes(r.id))
        .slice(0, 20),
    ]);
    expect(
      failed.filter(
        (r) =>
          !(r.start <= killNoticedBy && r.end >= killAt) &&
          !spans(r, dispatcherKillAt) &&
          !heldByKilledIntake(r),
      ),
      `${summary}\n${JSON.stringify(traces, null, 1)}`,
    ).toEqual([]);
    // What the killed dispatcher held ended (re-routed, or 503) within ~2 s, not at the timeout.
    const heldLong = sync.filter(
      (r) => spans(r, dispatcherKillAt) && r.end - dispatcherKillAt > 2_500,
    );
    expect(heldLong, summary).toEqual([]);
    expect(sync.filter((r) => r.status === 200).length).toBeGreaterThan(50);

    // No new request reached the node once it was marked Degraded.
    expect(stack.sims.get(DEGRADING)!.stats().payloads_received).toBe(degradedPayloads);
    expect(latest.get(DEGRADING)?.status).not.toBe("Active");
    stateSub.unsubscribe();
  });

  it("a dispatcher and an intake started while JetStream has no quorum stay up, are not ready, and become ready once the servers return", async () => {
    const [, second, third] = stack.cluster.servers;
    await Promise.all([second!.kill(), third!.kill()]);
    const [opsPort, intakePort] = await Promise.all([findFreePort(), findFreePort()]);
    const late = await stack.startService(
      "dispatcher-3",
      { DISPATCHER_OPS_PORT: String(opsPort) },
      false,
    );
    const lateIntake = await stack.startService(
      "intake-3",
      { ZML_PORT: String(intakePort) },
      false,
    );
    const readyz = async (port: number) => {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/readyz`, {
          signal: AbortSignal.timeout(2_000),
        });
        await res.text();
        return res.status;
      } catch {
        return 0;
      }
    };
    await pollUntil(async () => (await readyz(opsPort)) === 503, {
      timeoutMs: 30_000,
      message: "not-ready answer",
    });
    await late.waitForOutput(/could not start yet; retrying/, 30_000);
    // Intake listens only once its configuration is loaded.
    await lateIntake.waitForOutput(/intake could not start yet; retrying/, 30_000);
    expect(await readyz(opsPort)).toBe(503);
    expect(await readyz(intakePort)).toBe(0);

    await Promise.all([second!.start(), third!.start()]);
    for (const [proc, port] of [
      [late, opsPort],
      [lateIntake, intakePort],
    ] as const) {
      await pollUntil(async () => (await readyz(port)) === 200, {
        timeoutMs: 60_000,
        intervalMs: 250,
        message: `the late ${proc.name} to become ready`,
      }).catch((err: unknown) => {
        throw new Error(`${String(err)}\nits output:\n${proc.output().slice(-6000)}`);
      });
    }
    await late.waitForOutput(/"msg":"dispatcher ready"/, 5_000);
    await lateIntake.waitForOutput(/"msg":"intake ready"/, 5_000);
    // The same processes all along: no exit, no restart.
    const exited = await Promise.race([
      Promise.race([late.exited, lateIntake.exited]).then(() => true),
      sleep(100).then(() => false),
    ]);
    expect(exited).toBe(false);
  });
});
