// A batch producer that publishes jobs straight to JetStream (docs/batch.md, "Publishing a
// job"), as any NATS client would, with its own `batch-<account>` identity, on a 3-server
// cluster whose server leading ZML_JOBS is SIGKILLed while it publishes. During the election
// its publishes fail ("jetstream is not enabled" for no responders, 503, timeouts); the retry
// docs/batch.md names (the same publish, the same Nats-Msg-Id, a few seconds, within the
// stream's 10-minute duplicate window) gets every job accepted, and each stored exactly once.
import { readFileSync } from "node:fs";
import { jetstream, JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamClient } from "@nats-io/jetstream";
import { connect, headers, nkeyAuthenticator } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectBus, ensureJobStreams, natsConnectionOf } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { JOB_DEDUPE_WINDOW_MS, JOB_STREAMS, jobKey, jobSubmitSubject } from "@zml/contracts";
import { pollUntil, startNatsCluster } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ACCOUNT = "e2e";
const log = { info() {}, warn() {}, error() {} };

let cluster: NatsClusterHandle;
/** The dispatchers' identity: creates the streams and reads their state. */
let owner: Bus;
/** The producer: a plain nats.js connection as `batch-e2e`, nothing of ZML's bus library. */
let producer: NatsConnection;

beforeAll(async () => {
  cluster = await startNatsCluster({ batchAccounts: [ACCOUNT] });
  owner = await connectBus({ ...cluster.client("dispatcher"), name: "streams-owner", log });
  await ensureJobStreams(owner, { owner: true });
  const identity = cluster.client(`batch-${ACCOUNT}`);
  producer = await connect({
    servers: identity.servers.split(","),
    authenticator: nkeyAuthenticator(
      new TextEncoder().encode(readFileSync(identity.nkeySeedFile!, "utf8").trim()),
    ),
    tls: { caFile: identity.caFile! },
    ...(identity.inboxPrefix ? { inboxPrefix: identity.inboxPrefix } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
  });
}, 120_000);
afterAll(async () => {
  await producer?.close();
  await owner?.drain();
  await cluster?.stop();
});

const jsm = () => jetstreamManager(natsConnectionOf(owner));

async function leaderOf(stream: string): Promise<string | undefined> {
  try {
    return (await (await jsm()).streams.info(stream)).cluster?.leader;
  } catch {
    return undefined;
  }
}

/**
 * What docs/batch.md tells a producer to do: publish with the job's `Nats-Msg-Id`; on an
 * error that an election explains (no responders, which nats.js reports as "jetstream is
 * not enabled"; a 5xx from JetStream; a timeout; a connection moving to another server),
 * publish the same message with the same id again, 0.1 s doubling to 1 s apart, for up to
 * `budgetMs`. A try whose ack was lost may have stored the job: the id makes the next try a
 * duplicate, not a second job. A refusal (permissions, a 4xx) is not retried.
 */
async function publishJob(
  js: JetStreamClient,
  jobId: string,
  body: string,
  budgetMs = 30_000,
): Promise<{ tries: number; errors: string[] }> {
  const h = headers();
  h.set("Zml-Type", "job.v1");
  h.set("Zml-Model", "llama-3.1-8b-instruct");
  h.set("Zml-Path", "/v1/chat/completions");
  const subject = jobSubmitSubject(ACCOUNT, jobId);
  const msgID = jobKey(ACCOUNT, jobId);
  const deadline = Date.now() + budgetMs;
  const errors: string[] = [];
  let pauseMs = 100;
  for (let tries = 1; ; tries++) {
    try {
      await js.publish(subject, body, { headers: h, msgID, timeout: 2_000 });
      return { tries, errors };
    } catch (err) {
      const e = err as Error;
      errors.push(`${e.name}: ${e.message}`);
      const refused =
        (err instanceof JetStreamApiError && err.status < 500 && err.status !== 408) ||
        /permission/i.test(e.message);
      if (refused || Date.now() + pauseMs >= deadline) throw err;
      await new Promise((r) => setTimeout(r, pauseMs));
      pauseMs = Math.min(pauseMs * 2, 1_000);
    }
  }
}

describe("a direct producer through a leader election of ZML_JOBS", { timeout: 240_000 }, () => {
  it("every job published while the stream's leader is SIGKILLed is accepted, each stored once", async () => {
    const info = await (await jsm()).streams.info(JOB_STREAMS.jobs);
    expect(info.config.num_replicas).toBe(3);
    expect(info.config.duplicate_window).toBe(JOB_DEDUPE_WINDOW_MS * 1_000_000);
    const target = await pollUntil(() => leaderOf(JOB_STREAMS.jobs), {
      timeoutMs: 30_000,
      message: "a leader for the jobs stream",
    });

    const js = jetstream(producer);
    const body = JSON.stringify({
      model: "llama-3.1-8b-instruct",
      messages: [{ role: "user", content: "Hi" }],
    });
    const published: {
      jobId: string;
      at: number;
      done: Promise<{ tries: number; errors: string[] }>;
    }[] = [];
    let stopAt = Number.POSITIVE_INFINITY;
    let killAt = Number.POSITIVE_INFINITY;
    // One job every 100 ms, from 1 s before the kill until 1 s after a new leader is seen.
    const publisher = (async () => {
      for (let i = 0; Date.now() < stopAt; i++) {
        const jobId = `direct-${i}`;
        published.push({ jobId, at: Date.now(), done: publishJob(js, jobId, body) });
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await pollUntil(() => published.length >= 10 || undefined, {
      timeoutMs: 10_000,
      message: "publishing",
    });
    const downed = cluster.servers.find((s) => s.name === target)!;
    killAt = Date.now();
    await downed.kill();
    await pollUntil(
      async () => {
        const leader = await leaderOf(JOB_STREAMS.jobs);
        return leader !== undefined && leader !== target ? leader : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100, message: "a new leader for the jobs stream" },
    );
    const ledAt = Date.now();
    stopAt = ledAt + 1_000;
    await publisher;

    // Every publish was accepted, whatever it met on the way.
    const outcomes = await Promise.allSettled(published.map((p) => p.done));
    const rejected = outcomes.flatMap((o, i) =>
      o.status === "rejected" ? [`${published[i]!.jobId}: ${String(o.reason)}`] : [],
    );
    expect(rejected).toEqual([]);
    // Some of them were published during the election, not only around it.
    const duringElection = published.filter((p) => p.at >= killAt && p.at < ledAt);
    expect(duringElection.length).toBeGreaterThan(0);

    // Each job is in the stream exactly once: no publish lost, no try stored twice.
    const state = await pollUntil(
      async () => {
        try {
          return (await (await jsm()).streams.info(JOB_STREAMS.jobs, { subjects_filter: ">" }))
            .state;
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 30_000, message: "the jobs stream's state" },
    );
    const counts = state.subjects ?? {};
    for (const p of published) {
      expect(counts[jobSubmitSubject(ACCOUNT, p.jobId)], p.jobId).toBe(1);
    }
    expect(state.messages).toBe(published.length);

    // Within the duplicate window, the same id again is the same job, not a second one.
    const again = await js.publish(jobSubmitSubject(ACCOUNT, published[0]!.jobId), body, {
      msgID: jobKey(ACCOUNT, published[0]!.jobId),
      timeout: 5_000,
    });
    expect(again.duplicate).toBe(true);

    const retried = outcomes.flatMap((o) =>
      o.status === "fulfilled" && o.value.tries > 1 ? [o.value] : [],
    );
    const seen = new Set(retried.flatMap((r) => r.errors.map((e) => e.replace(/\d+/g, "N"))));
    // For the record (docs/batch.md quotes it): how many needed a retry, and what they met.
    process.stdout.write(
      `direct producer: ${published.length} jobs, ${duringElection.length} during the election ` +
        `(${ledAt - killAt} ms), ${retried.length} retried (at most ${Math.max(0, ...retried.map((r) => r.tries))} tries); ` +
        `errors: ${[...seen].join(" | ")}\n`,
    );
  });
});
