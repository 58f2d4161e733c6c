// Batch jobs on a 3-node NATS cluster under a steady flow, with two replicas of
// the dispatcher and intake. The jobs stream's leader is SIGKILLed: submissions ride out the
// election, and no finished job runs again. With that server still down, a fresh dispatcher
// and intake become ready within 5 s. A SIGKILLed dispatcher's jobs run again within 10 s,
// each re-execution counted. Executions are counted at the node itself (job-node.ts).
import { jetstreamManager } from "@nats-io/jetstream";
import { natsConnectionOf } from "@zml/bus";
import { JOB_STREAMS } from "@zml/contracts";
import { findFreePort, pollUntil } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startClusterStack } from "../support/cluster-stack.ts";
import type { ClusterStack } from "../support/cluster-stack.ts";
import { startJobNode } from "../support/job-node.ts";
import type { JobNode } from "../support/job-node.ts";
import { postJob } from "../support/http.ts";
import { authHeaders, chatBody, MODEL } from "../support/stack.ts";

let stack: ClusterStack;
let node: JobNode;

beforeAll(async () => {
  node = await startJobNode({ delayMs: 200 });
  stack = await startClusterStack({
    nodes: [],
    ownNodes: [node.spec("job-node", MODEL, 64)],
    replicasOf: { "health-aggregator": 1, attestation: 1, dispatcher: 2, intake: 2 },
  });
}, 180_000);
afterAll(async () => {
  await stack?.stop();
  await node?.close();
});

const jsm = () => jetstreamManager(natsConnectionOf(stack.bus));

async function leaderOf(stream: string): Promise<string | undefined> {
  try {
    return (await (await jsm()).streams.info(stream)).cluster?.leader;
  } catch {
    return undefined;
  }
}

/**
 * Every stream and bucket has a leader among the running servers. Asked of each stream: the
 * stream list leaves out streams that did not answer the meta leader in time (no leader).
 */
async function everyStreamLed(): Promise<boolean> {
  const running = new Set(stack.cluster.servers.filter((s) => s.isRunning()).map((s) => s.name));
  try {
    const names = await (await jsm()).streams.names().next();
    const leaders = await Promise.all(names.map(leaderOf));
    return names.length > 0 && leaders.every((l) => l !== undefined && running.has(l));
  } catch {
    return false;
  }
}

/**
 * Moves the leadership of the e2e account's batch consumer and of the results stream to the
 * jobs stream's leader (stepping them down until they land there), so that killing that one
 * server takes the job stream's, the acks' and the results' leaders at once: the worst case
 * for jobs in flight. Returns that server's name.
 */
async function gatherLeaders(): Promise<string> {
  const nc = natsConnectionOf(stack.bus);
  const consumer = `zml-batch-e2e`;
  return pollUntil(
    async () => {
      const m = await jsm();
      const target = (await m.streams.info(JOB_STREAMS.jobs)).cluster?.leader;
      const acks = (await m.consumers.info(JOB_STREAMS.jobs, consumer)).cluster?.leader;
      const results = (await m.streams.info(JOB_STREAMS.results)).cluster?.leader;
      if (target === undefined || acks === undefined || results === undefined) return undefined;
      if (acks === target && results === target) return target;
      if (acks !== target) {
        await nc.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${JOB_STREAMS.jobs}.${consumer}`);
      }
      if (results !== target) {
        await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${JOB_STREAMS.results}`);
      }
      return undefined;
    },
    { timeoutMs: 90_000, intervalMs: 500, message: "the leaders in one place" },
  );
}

async function statusOf(url: string): Promise<number> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await res.text();
    return res.status;
  } catch {
    return 0;
  }
}

interface Submission {
  jobId: string;
  at: number;
  /** The first try's answer and how long it took. */
  status: number;
  ms: number;
  retryAfter: string | null;
  /** Accepted on some try. */
  accepted: boolean;
}

async function submitJob(url: string, jobId: string): Promise<Submission> {
  const at = Date.now();
  let first: Omit<Submission, "accepted"> | undefined;
  for (let attempt = 0; attempt < 10; attempt++) {
    const startedAt = Date.now();
    const { status, retryAfter } = await postJob(url, jobId);
    first ??= { jobId, at, status, ms: Date.now() - startedAt, retryAfter };
    if (status === 202) return { ...first, accepted: true };
    if (status !== 503) break;
    // As a client would: wait as told, then the same job id again.
    await new Promise((r) => setTimeout(r, Number(retryAfter ?? "1") * 1_000));
  }
  return { ...first!, accepted: false };
}

/** One result message per job id (subjects of the results stream and their counts). */
async function resultCounts(): Promise<Map<string, number>> {
  const info = await (await jsm()).streams.info(JOB_STREAMS.results, { subjects_filter: ">" });
  const counts = new Map<string, number>();
  for (const [subject, n] of Object.entries(info.state.subjects ?? {})) {
    counts.set(subject.slice(subject.lastIndexOf(".") + 1), n);
  }
  return counts;
}

async function jobView(url: string, jobId: string) {
  const res = await fetch(`${url}/v1/jobs/${jobId}`, { headers: authHeaders() });
  return (await res.json()) as { status?: string; reexecutions?: number; deliveries?: number };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

/** The sum of one counter over dispatchers' `/metrics`. */
async function counterSum(opsUrls: string[], name: string): Promise<number> {
  let sum = 0;
  for (const url of opsUrls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, "gm"))) {
      sum += Number(m[1]);
    }
  }
  return sum;
}

/** A dispatcher's ops URL, from its ready line. */
function opsUrlOf(proc: ManagedProcess): string {
  const m = /"ops":"(http:\/\/[^"]+)"[^\n]*"msg":"dispatcher ready"/.exec(proc.output());
  if (!m) throw new Error(`${proc.name} has not said where its ops port is`);
  return m[1]!;
}

describe("batch jobs on a 3-node NATS cluster", { timeout: 300_000 }, () => {
  let downed: (typeof stack.cluster.servers)[number] | undefined;

  it("the jobs stream's leader SIGKILLed under steady submissions: ≥ 95 % accepted on the first try, the rest 503 with Retry-After; no job that had finished runs again", async () => {
    const target = await gatherLeaders();
    // Jobs of a second: some in flight at any moment.
    node.setDelay(1_000);
    const submissions: Promise<Submission>[] = [];
    let on = true;
    const submitter = (async () => {
      for (let i = 0; on; i++) {
        const url = stack.intakeUrls[i % stack.intakeUrls.length]!;
        submissions.push(submitJob(url, `lk-${i}`));
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await pollUntil(() => node.executions().filter((e) => e.finishedAt).length >= 20, {
      timeoutMs: 30_000,
      message: "jobs flowing",
    });

    expect(await leaderOf(JOB_STREAMS.jobs)).toBe(target);
    downed = stack.cluster.servers.find((s) => s.name === target)!;
    const killAt = Date.now();
    await downed.kill();
    const finishedBeforeKill = new Set(
      node
        .executions()
        .filter((e) => e.finishedAt !== undefined && e.finishedAt < killAt)
        .map((e) => e.jobId),
    );
    // Until a new leader is in place, and 30 submissions after it.
    await pollUntil(async () => (await leaderOf(JOB_STREAMS.jobs)) !== undefined, {
      timeoutMs: 30_000,
      intervalMs: 100,
      message: "a new leader for the jobs stream",
    });
    const ledAt = Date.now();
    const before = submissions.length;
    await pollUntil(() => submissions.length >= before + 30, { timeoutMs: 30_000 });
    on = false;
    await submitter;
    const all = await Promise.all(submissions);

    const ids = all.map((s) => s.jobId);
    await pollUntil(
      async () => {
        const counts = await resultCounts().catch(() => new Map<string, number>());
        return ids.every((id) => counts.has(id));
      },
      { timeoutMs: 60_000, intervalMs: 500, message: "every job's result" },
    );
    const counts = await resultCounts();

    // Around the kill: from just before it to just after the new leader.
    const around = all.filter((s) => s.at >= killAt - 1_000 && s.at <= ledAt + 1_000);
    const firstTry = around.filter((s) => s.status === 202);
    const times = all.map((s) => s.ms).sort((a, b) => a - b);
    const aroundTimes = around.map((s) => s.ms).sort((a, b) => a - b);
    const reexecutedFinished = [...finishedBeforeKill].filter((id) => node.countOf(id) > 1);
    const ranTwice = ids.filter((id) => node.countOf(id) > 1);
    // Jobs whose result or ack was carried through the election by trying again.
    const carried = new Set(
      [...stack.logs().matchAll(/"job_id":"(lk-\d+)"[^\n]*batch job not finished yet/g)].map(
        (m) => m[1],
      ),
    );
    const summary = {
      killed: downed.name,
      leader_seen_after_ms: ledAt - killAt,
      submissions: all.length,
      around_kill: around.length,
      around_first_try_202: firstTry.length,
      not_first_try: around.filter((s) => s.status !== 202).map((s) => [s.status, s.retryAfter]),
      answer_ms_all: { p50: percentile(times, 50), p95: percentile(times, 95), max: times.at(-1) },
      answer_ms_around: {
        p50: percentile(aroundTimes, 50),
        p90: percentile(aroundTimes, 90),
        p95: percentile(aroundTimes, 95),
        max: aroundTimes.at(-1),
      },
      finished_before_kill: finishedBeforeKill.size,
      carried_through_election: carried.size,
      reexecuted_finished: reexecutedFinished,
      ran_twice: ranTwice,
    };
    process.stdout.write(`cluster-jobs leader kill: ${JSON.stringify(summary)}\n`);

    expect(
      all.every((s) => s.accepted),
      JSON.stringify(summary),
    ).toBe(true);
    expect(firstTry.length / around.length, JSON.stringify(summary)).toBeGreaterThanOrEqual(0.95);
    for (const s of around.filter((x) => x.status !== 202)) {
      expect([s.status, s.retryAfter !== null]).toEqual([503, true]);
    }
    expect(ids.filter((id) => counts.get(id) !== 1)).toEqual([]);
    expect(finishedBeforeKill.size).toBeGreaterThan(10);
    expect(reexecutedFinished, JSON.stringify(summary)).toEqual([]);
    // Jobs were in flight at the kill, and finished through the election.
    expect(carried.size, JSON.stringify(summary)).toBeGreaterThan(0);
    const opsUrls = [...stack.services]
      .filter(([name]) => name.startsWith("dispatcher"))
      .map(([, proc]) => opsUrlOf(proc));
    expect(await counterSum(opsUrls, "zml_batch_job_reexecutions_total")).toBe(ranTwice.length);
  });

  it("with that server still down, a freshly started dispatcher and intake are ready within 5 s and serve traffic", async () => {
    expect(downed?.isRunning()).toBe(false);
    await stack.cluster.waitHealthy();
    await pollUntil(everyStreamLed, { timeoutMs: 60_000, message: "every stream led" });

    const [opsPort, intakePort] = await Promise.all([findFreePort(), findFreePort()]);
    const timeToReady = async (name: string, readyz: string, extra: Record<string, string>) => {
      const startedAt = Date.now();
      const proc = await stack.startService(name, extra, false);
      await pollUntil(async () => (await statusOf(readyz)) === 200, {
        timeoutMs: 30_000,
        intervalMs: 50,
        message: `${name} ready`,
      }).catch((err: unknown) => {
        throw new Error(`${String(err)}\n${name} output:\n${proc.output().slice(-4000)}`);
      });
      return Date.now() - startedAt;
    };
    const [dispatcherMs, intakeMs] = await Promise.all([
      timeToReady("dispatcher-3", `http://127.0.0.1:${opsPort}/readyz`, {
        DISPATCHER_OPS_PORT: String(opsPort),
      }),
      timeToReady("intake-3", `http://127.0.0.1:${intakePort}/readyz`, {
        ZML_PORT: String(intakePort),
      }),
    ]);
    process.stdout.write(
      `cluster-jobs quorum start: dispatcher ready in ${dispatcherMs} ms, intake in ${intakeMs} ms\n`,
    );
    expect(dispatcherMs).toBeLessThan(5_000);
    expect(intakeMs).toBeLessThan(5_000);

    // Both serve: sync requests through the new intake, some routed by the new dispatcher,
    // and a job submitted there runs.
    const url = `http://127.0.0.1:${intakePort}`;
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: authHeaders(),
        body: chatBody({ messages: [{ role: "user", content: `sync-${i}` }] }),
      });
      expect(res.status, await res.text()).toBe(200);
    }
    const decided = await counterSum(
      [`http://127.0.0.1:${opsPort}`],
      "zml_dispatcher_decisions_total",
    );
    expect(decided).toBeGreaterThan(0);
    expect((await submitJob(url, "after-start")).status).toBe(202);
    await pollUntil(async () => (await jobView(url, "after-start")).status === "done", {
      timeoutMs: 20_000,
      message: "the job submitted through the new intake done",
    });
    await downed!.start();
  });

  it("a SIGKILLed dispatcher's jobs run again within 10 s, each re-execution counted", async () => {
    node.setDelay(4_000);
    const ids = Array.from({ length: 12 }, (_, i) => `dk-${i}`);
    await Promise.all(ids.map((id, i) => submitJob(stack.intakeUrls[i % 2]!, id)));
    // Every job running on the node.
    await pollUntil(() => ids.every((id) => node.countOf(id) === 1), {
      timeoutMs: 20_000,
      message: "every job running",
    });
    // The dispatcher running most of them.
    const dispatchers = [...stack.services].filter(([name]) => name.startsWith("dispatcher"));
    const runs = (proc: ManagedProcess) =>
      ids.filter((id) => proc.output().includes(`"job_id":"${id}","account":"e2e","deliveries"`))
        .length;
    const [victimName, victim] = dispatchers.sort(([, a], [, b]) => runs(b) - runs(a))[0]!;
    const survivorOps = dispatchers.filter(([n]) => n !== victimName).map(([, p]) => opsUrlOf(p));
    const countedBefore = await counterSum(survivorOps, "zml_batch_job_reexecutions_total");
    const killAt = Date.now();
    await victim.kill();
    stack.services.delete(victimName);
    node.setDelay(200);

    const abandoned = await pollUntil(
      () => {
        const cut = node
          .executions()
          .filter((e) => ids.includes(e.jobId) && e.abandonedAt !== undefined);
        return cut.length > 0 ? cut : undefined;
      },
      { timeoutMs: 5_000, message: "the killed dispatcher's executions cut off" },
    );
    const cutIds = [...new Set(abandoned.map((e) => e.jobId))];
    await pollUntil(() => cutIds.every((id) => node.countOf(id) === 2), {
      timeoutMs: 15_000,
      intervalMs: 50,
      message: "every cut-off job running again",
    });
    const againAfterMs = cutIds.map(
      (id) => node.executions().filter((e) => e.jobId === id)[1]!.startedAt - killAt,
    );
    await pollUntil(
      async () => {
        const counts = await resultCounts();
        return ids.every((id) => counts.get(id) === 1);
      },
      { timeoutMs: 30_000, intervalMs: 250, message: "every job's result" },
    );
    const views = await Promise.all(ids.map((id) => jobView(stack.intakeUrls[1]!, id)));
    const counted =
      (await counterSum(survivorOps, "zml_batch_job_reexecutions_total")) - countedBefore;
    process.stdout.write(
      `cluster-jobs dispatcher kill: ${JSON.stringify({ killed: victimName, cut: cutIds.length, again_after_ms: againAfterMs, counted })}\n`,
    );

    expect(Math.max(...againAfterMs)).toBeLessThan(10_000);
    expect(ids.filter((id) => node.countOf(id) !== (cutIds.includes(id) ? 2 : 1))).toEqual([]);
    expect(views.map((v) => v.status)).toEqual(ids.map(() => "done"));
    expect(views.map((v) => v.reexecutions)).toEqual(
      ids.map((id) => (cutIds.includes(id) ? 1 : 0)),
    );
    // The survivors counted each re-execution, once.
    expect(counted).toBe(cutIds.length);
  });
});
