// SIGTERM to each service with work in flight: readiness fails first, the work in flight
// completes, the process exits 0 without a closed-connection error; intake answers what
// still arrives while it stops with a retryable 503 that has a body.
import { pollUntil } from "@zml/harness";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { opsUrlOf, terminateAndWatch, uncleanStopLines } from "../support/lifecycle.ts";
import { readResults, submitJob } from "../support/jobs.ts";
import { MODEL, authHeaders, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const SLOW_MS = 2_500;
const NOT_READY_MS = 600;

let stack: Stack;
beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [{ nodeId: "slow-g", family: "H100", maxConcurrency: 64, ttftMs: SLOW_MS }],
    dispatchers: 2,
    env: { ZML_SHUTDOWN_NOT_READY_MS: String(NOT_READY_MS), ZML_SHUTDOWN_GRACE_MS: "15000" },
  });
});
afterAll(() => stack?.stop());

/** A chat request with the time its answer arrived. */
const timedChat = async () => {
  const answer = await postChat(stack.intakeUrl, chatBody());
  return { ...answer, at: Date.now() };
};

/** Waits until the node holds `n` more requests than `before`. */
async function atNode(before: number, n: number): Promise<void> {
  const sim = stack.sims.get("slow-g")!;
  await pollUntil(() => sim.stats().payloads_received >= before + n, {
    timeoutMs: 20_000,
    message: `${n} requests at the node`,
  });
}

describe("graceful stop on SIGTERM", () => {
  it("health-aggregator and attestation: not ready first, then exit 0, cleanly", async () => {
    for (const name of ["health-aggregator", "attestation"]) {
      const proc = stack.services.get(name)!;
      const report = await terminateAndWatch(proc, opsUrlOf(proc));
      stack.services.delete(name);
      expect(report.exitCode, proc.output()).toBe(0);
      expect(report.notReadyAt).toBeDefined();
      expect(report.notReadyAt!).toBeLessThan(report.exitedAt);
      expect(uncleanStopLines(proc.output())).toEqual([]);
      await stack.startService(name);
    }
  });

  it("dispatcher: its in-flight requests and running job complete, then it exits 0", async () => {
    const sim = stack.sims.get("slow-g")!;
    const before = sim.stats().payloads_received;
    const requests = Array.from({ length: 12 }, timedChat);
    await submitJob(stack.bus, "e2e", "graceful-job-1", MODEL);
    await atNode(before, 13);
    // Stop the replica that runs the job: it has at least that in flight.
    const [name, proc] = await pollUntil(() =>
      [...stack.services].find(
        ([n, p]) => n.startsWith("dispatcher") && p.output().includes('"job_id":"graceful-job-1"'),
      ),
    );
    const report = await terminateAndWatch(proc, opsUrlOf(proc));
    stack.services.delete(name);

    expect(report.exitCode, proc.output()).toBe(0);
    expect(report.notReadyAt).toBeDefined();
    expect(report.notReadyAt!).toBeLessThan(report.exitedAt);
    expect(uncleanStopLines(proc.output())).toEqual([]);
    const answers = await Promise.all(requests);
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200));
    // Not ready while the work in flight was still running.
    expect(report.notReadyAt!).toBeLessThan(Math.min(...answers.map((a) => a.at)));
    // Nothing was re-sent: every request was finished by the replica that took it.
    expect(sim.stats().payloads_received - before).toBe(13);
    const results = (await readResults(stack.bus)).filter((r) => r.jobId === "graceful-job-1");
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ outcome: "done", status: 200 });
    await stack.startService(name);
  });

  it("intake: in-flight requests complete, later ones get 503 shutting_down with a body, exit 0", async () => {
    const intake = stack.services.get("intake")!;
    const sim = stack.sims.get("slow-g")!;
    const before = sim.stats().payloads_received;
    // One keep-alive connection: a request on it is in flight when the stop begins, and the
    // next one goes out on the same connection once that one is answered.
    const agent = new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 30_000 });
    const onAgent = () =>
      request(`${stack.intakeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: authHeaders(),
        body: chatBody(),
        dispatcher: agent,
      });
    const first = onAgent();
    const requests = Array.from({ length: 8 }, timedChat);
    await atNode(before, 9);

    const watching = terminateAndWatch(intake, stack.intakeUrl);
    await pollUntil(() => intake.output().includes('"msg":"shutting down"'));
    await new Promise((r) => setTimeout(r, NOT_READY_MS + 200));
    const late = onAgent().catch((err: unknown) => err as Error);
    const firstAnswer = await first;
    expect(firstAnswer.statusCode).toBe(200);
    await firstAnswer.body.text();
    const lateAnswer = await late;
    const report = await watching;
    stack.services.delete("intake");

    expect(report.exitCode, intake.output()).toBe(0);
    expect(report.notReadyAt).toBeDefined();
    expect(report.notReadyAt!).toBeLessThan(report.exitedAt);
    expect(uncleanStopLines(intake.output())).toEqual([]);
    const answers = await Promise.all(requests);
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
    expect(report.notReadyAt!).toBeLessThan(Math.min(...answers.map((a) => a.at)));
    // The request that came on an open connection while intake drained got a retryable
    // 503 with a body, never a bare one.
    if (lateAnswer instanceof Error) throw lateAnswer;
    expect(lateAnswer.statusCode).toBe(503);
    expect(lateAnswer.headers["retry-after"]).toBe("1");
    expect(lateAnswer.headers.connection).toBe("close");
    expect(JSON.parse(await lateAnswer.body.text())).toMatchObject({
      error: { code: "shutting_down" },
    });
    await agent.close();
  });
});
