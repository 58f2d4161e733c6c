// A dispatcher that dies with work in flight: its sync requests end within about a second
// (re-routed, or 503 `dispatcher_lost` with Retry-After), the other replica's requests
// succeed, and a batch job it was running runs again with two deliveries in its status and
// one result. A dispatcher stopped gracefully while a job runs past its grace hands the
// job back at once.
import { pollUntil } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { readResults, submitJob } from "../support/jobs.ts";
import { MODEL, authHeaders, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const SLOW_MS = 4_000;
const IN_FLIGHT = 16;
/** Loss detection is ~1 s; the rest is slack for a loaded 2-core machine. */
const LOSS_BOUND_MS = 2_500;

interface Timed {
  status: number;
  code: string | undefined;
  retryAfter: string | undefined;
  endedAt: number;
}

async function timedChat(url: string): Promise<Timed> {
  const r = await postChat(url, chatBody());
  let code: string | undefined;
  try {
    code = (JSON.parse(r.text) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  const retryAfter = r.headers["retry-after"];
  return {
    status: r.status,
    code,
    retryAfter: typeof retryAfter === "string" ? retryAfter : undefined,
    endedAt: Date.now(),
  };
}

/** Fires `n` slow requests and resolves once the node has received every one of them. */
async function inFlightRequests(stack: Stack, n: number): Promise<Array<Promise<Timed>>> {
  const sim = stack.sims.get("slow-1")!;
  const before = sim.stats().payloads_received;
  const requests = Array.from({ length: n }, () => timedChat(stack.intakeUrl));
  await pollUntil(() => sim.stats().payloads_received >= before + n, {
    timeoutMs: 20_000,
    message: `${n} requests at the node`,
  });
  return requests;
}

/** The dispatcher replica whose log says it started the job. */
async function runnerOf(stack: Stack, jobId: string): Promise<[string, ManagedProcess]> {
  return pollUntil(
    () =>
      [...stack.services].find(
        ([name, proc]) =>
          name.startsWith("dispatcher") &&
          proc.output().includes(`"job_id":"${jobId}"`) &&
          /batch job started/.test(proc.output()),
      ),
    { timeoutMs: 20_000, message: `a dispatcher to start ${jobId}` },
  );
}

async function jobView(stack: Stack, jobId: string) {
  const res = await request(`${stack.intakeUrl}/v1/jobs/${jobId}`, { headers: authHeaders() });
  return (await res.body.json()) as {
    status: string;
    deliveries: number;
    reexecutions: number;
    result: { http_status: number } | null;
  };
}

const slowNode = {
  nodeId: "slow-1",
  family: "H100",
  maxConcurrency: 64,
  ttftMs: SLOW_MS,
};

describe("a dispatcher SIGKILLed with work in flight (no re-routes)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startActiveStack({
      nodes: [slowNode],
      dispatchers: 2,
      env: { ZML_DISPATCHER_REROUTES: "0", BATCH_ACK_WAIT_MS: "3000" },
    });
  });
  afterAll(() => stack?.stop());

  it("ends its requests with 503 dispatcher_lost within about a second; the other replica's succeed", async () => {
    const requests = await inFlightRequests(stack, IN_FLIGHT);
    const killedAt = Date.now();
    await stack.services.get("dispatcher")!.kill();
    stack.services.delete("dispatcher");
    const results = await Promise.all(requests);

    const lost = results.filter((r) => r.status === 503);
    const served = results.filter((r) => r.status === 200);
    expect(lost.length + served.length, JSON.stringify(results)).toBe(IN_FLIGHT);
    // The queue group spreads 16 requests over both replicas.
    expect(lost.length).toBeGreaterThan(0);
    expect(served.length).toBeGreaterThan(0);
    for (const r of lost) {
      expect(r.code).toBe("dispatcher_lost");
      expect(r.retryAfter).toBe("1");
      expect(r.endedAt - killedAt).toBeLessThan(LOSS_BOUND_MS);
    }
    await stack.startService("dispatcher");
  });

  it("runs a job again after its dispatcher died: two deliveries and one re-execution in its status, one result", async () => {
    const jobId = "killed-run-1";
    const sim = stack.sims.get("slow-1")!;
    const before = sim.stats().payloads_received;
    await submitJob(stack.bus, "e2e", jobId, MODEL);
    const [name, runner] = await runnerOf(stack, jobId);
    await pollUntil(() => sim.stats().payloads_received > before, { timeoutMs: 10_000 });
    await runner.kill();
    stack.services.delete(name);

    const done = await pollUntil(
      async () => {
        const view = await jobView(stack, jobId);
        return view.status === "done" ? view : undefined;
      },
      { timeoutMs: 30_000, message: `${jobId} done` },
    );
    expect(done.deliveries).toBe(2);
    expect(done.reexecutions).toBe(1);
    expect(done.result?.http_status).toBe(200);
    expect(sim.stats().payloads_received - before).toBe(2);
    const results = (await readResults(stack.bus)).filter((r) => r.jobId === jobId);
    expect(results).toHaveLength(1);
  });
});

describe("a dispatcher SIGKILLed with work in flight (re-routes allowed)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startActiveStack({
      nodes: [slowNode],
      dispatchers: 2,
      // A short grace, and a 30 s ack wait: a job handed back on stop must be taken again
      // well before JetStream would redeliver it on its own.
      env: { ZML_SHUTDOWN_GRACE_MS: "1000", BATCH_ACK_WAIT_MS: "30000" },
    });
  });
  afterAll(() => stack?.stop());

  it("re-routes the lost requests to the other replica, where they succeed", async () => {
    const sim = stack.sims.get("slow-1")!;
    const before = sim.stats().payloads_received;
    const requests = await inFlightRequests(stack, IN_FLIGHT);
    const killedAt = Date.now();
    await stack.services.get("dispatcher")!.kill();
    stack.services.delete("dispatcher");
    const results = await Promise.all(requests);

    expect(results.map((r) => r.status)).toEqual(Array(IN_FLIGHT).fill(200));
    const intake = stack.services.get("intake")!;
    const reroutes = intake.output().match(/request re-routed/g)?.length ?? 0;
    expect(reroutes).toBeGreaterThan(0);
    // Each re-routed request reached the node once more, and all ended within one more node
    // answer after the loss was noticed, not at the request timeout.
    expect(sim.stats().payloads_received - before).toBe(IN_FLIGHT + reroutes);
    const lastEnd = Math.max(...results.map((r) => r.endedAt));
    expect(lastEnd - killedAt).toBeLessThan(LOSS_BOUND_MS + SLOW_MS + 2_000);
    await stack.startService("dispatcher");
  });

  it("hands a job still running at the end of a graceful stop's grace back at once", async () => {
    const jobId = "handed-back-1";
    await submitJob(stack.bus, "e2e", jobId, MODEL);
    const [name, runner] = await runnerOf(stack, jobId);
    const stoppedAt = Date.now();
    process.kill(runner.pid, "SIGTERM");
    expect(await runner.exited).toBe(0);
    stack.services.delete(name);
    await runner.waitForOutput(/handed back/);

    const done = await pollUntil(
      async () => {
        const view = await jobView(stack, jobId);
        return view.status === "done" ? view : undefined;
      },
      { timeoutMs: 25_000, message: `${jobId} done` },
    );
    expect(done.deliveries).toBe(2);
    // It had started on the node: running it again is a re-execution.
    expect(done.reexecutions).toBe(1);
    // Redelivered by the nak, not by the 30 s ack wait.
    expect(Date.now() - stoppedAt).toBeLessThan(20_000);
    expect((await readResults(stack.bus)).filter((r) => r.jobId === jobId)).toHaveLength(1);
  });
});
