// What a batch producer (`batch-<account>`) may do on the batch streams, on a real
// nats-server whose identities have the permissions `zml bus-credentials` writes: queue its
// own account's jobs and read its own account's results by direct get, and see nothing of
// another account's jobs or results, by any JetStream read.
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { JOB_STREAMS, jobResultSubject, jobSubmitSubject } from "@zml/contracts";
import { startNatsServer } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectBus, ensureJobStreams, natsConnectionOf, publishToStream } from "../src/index.ts";
import type { Bus } from "../src/index.ts";

const log = { info() {}, warn() {}, error() {} };
const RESULTS = JOB_STREAMS.results;
const text = (data: Uint8Array) => new TextDecoder().decode(data);
const VIOLATION = /permissions violation/i;

describe("a batch producer reading results", { timeout: 30_000 }, () => {
  let nats: NatsServerHandle;
  let dispatcher: Bus;
  let producerA: Bus;
  let jsmA: JetStreamManager;
  let otherSeq: number;

  beforeAll(async () => {
    nats = await startNatsServer({ env: { PATH: process.env.PATH }, batchAccounts: ["a", "b"] });
    // The results stream as the dispatcher creates it, with one result for each account.
    dispatcher = await connectBus({ ...nats.client("dispatcher"), name: "dispatcher", log });
    await ensureJobStreams(dispatcher, { owner: true });
    const bytes = (s: string) => new TextEncoder().encode(s);
    await publishToStream(dispatcher, jobResultSubject("a", "job-1"), bytes("result of a"));
    await publishToStream(dispatcher, jobResultSubject("b", "job-1"), bytes("result of b"));
    const jsm = await jetstreamManager(natsConnectionOf(dispatcher));
    otherSeq = (await jsm.streams.getMessage(RESULTS, {
      last_by_subj: jobResultSubject("b", "job-1"),
    }))!.seq;

    producerA = await connectBus({ ...nats.client("batch-a"), name: "batch-a", log });
    jsmA = await jetstreamManager(natsConnectionOf(producerA), { checkAPI: false });
  });
  afterAll(async () => {
    await producerA?.drain();
    await dispatcher?.drain();
    await nats?.stop();
  });

  it("reads its own result by direct get, as docs/batch.md shows", async () => {
    const own = await jsmA.direct.getMessage(RESULTS, {
      last_by_subj: jobResultSubject("a", "job-1"),
    });
    expect(own && text(own.data)).toBe("result of a");
    // A job without a result yet is none, not an error.
    const missing = await jsmA.direct.getMessage(RESULTS, {
      last_by_subj: jobResultSubject("a", "job-2"),
    });
    expect(missing).toBeNull();
  });

  it("cannot read another account's result, by direct get, message get or sequence", async () => {
    await expect(
      jsmA.direct.getMessage(RESULTS, { last_by_subj: jobResultSubject("b", "job-1") }),
    ).rejects.toThrow(VIOLATION);
    await expect(
      jsmA.streams.getMessage(RESULTS, { last_by_subj: jobResultSubject("b", "job-1") }),
    ).rejects.toThrow(VIOLATION);
    await expect(jsmA.direct.getMessage(RESULTS, { seq: otherSeq })).rejects.toThrow(VIOLATION);
    // Stream info could list every account's result subjects (`subjects_filter`).
    await expect(jsmA.streams.info(RESULTS)).rejects.toThrow(VIOLATION);
    // Consumers would deliver whatever their filter names.
    await expect(
      jsmA.consumers.add(RESULTS, { filter_subject: jobResultSubject("b", "job-1") }),
    ).rejects.toThrow(VIOLATION);
  });

  it("gets no other message through its own subject with a request body (the server refuses one)", async () => {
    // The only form permissions allow it: a body asking for another sequence or subject.
    const nc = natsConnectionOf(producerA);
    const own = `$JS.API.DIRECT.GET.${RESULTS}.${jobResultSubject("a", "job-1")}`;
    for (const body of [{ seq: otherSeq }, { last_by_subj: jobResultSubject("b", "job-1") }]) {
      const reply = await nc.request(own, JSON.stringify(body), { timeout: 5000 });
      expect(text(reply.data)).toBe("");
      expect(reply.headers?.code, JSON.stringify(body)).toBe(408);
    }
  });
});

describe("a batch producer queueing jobs", { timeout: 30_000 }, () => {
  it("queues its own account's jobs, and cannot see which jobs another account has queued", async () => {
    await using nats = await startNatsServer({
      env: { PATH: process.env.PATH },
      batchAccounts: ["a", "b"],
    });
    const dispatcher = await connectBus({ ...nats.client("dispatcher"), name: "d", log });
    const producerA = await connectBus({ ...nats.client("batch-a"), name: "a", log });
    const producerB = await connectBus({ ...nats.client("batch-b"), name: "b", log });
    try {
      await ensureJobStreams(dispatcher, { owner: true });
      const a = natsConnectionOf(producerA);
      const b = natsConnectionOf(producerB);
      await jetstream(b).publish(jobSubmitSubject("b", "their-job"), "{}");
      const ack = await jetstream(a).publish(jobSubmitSubject("a", "own-job"), "{}");
      expect(ack.stream).toBe(JOB_STREAMS.jobs);
      // Stream info lists the subjects of every pending job, other accounts' included.
      const jsm = await jetstreamManager(a, { checkAPI: false });
      await expect(jsm.streams.info(JOB_STREAMS.jobs, { subjects_filter: ">" })).rejects.toThrow(
        VIOLATION,
      );
    } finally {
      await producerA.drain();
      await producerB.drain();
      await dispatcher.drain();
    }
  });
});

describe("an existing results stream without direct get", { timeout: 30_000 }, () => {
  it("gets it from its owner, so that producers can read their results", async () => {
    await using nats = await startNatsServer({
      env: { PATH: process.env.PATH },
      batchAccounts: ["a"],
    });
    const dispatcher = await connectBus({ ...nats.client("dispatcher"), name: "d", log });
    const producer = await connectBus({ ...nats.client("batch-a"), name: "p", log });
    try {
      const jsm = await jetstreamManager(natsConnectionOf(dispatcher));
      // The stream as releases before this one created it.
      await ensureJobStreams(dispatcher, { owner: true });
      const made = (await jsm.streams.info(RESULTS)).config;
      await jsm.streams.update(RESULTS, { ...made, allow_direct: false });
      const subject = jobResultSubject("a", "job-1");
      await publishToStream(dispatcher, subject, new TextEncoder().encode("kept"));
      const reader = await jetstreamManager(natsConnectionOf(producer), { checkAPI: false });
      // Nobody answers a direct get on a stream without it (on 2.9 the JetStream API takes
      // the request and lets it time out).
      const impatient = await jetstreamManager(natsConnectionOf(producer), {
        checkAPI: false,
        timeout: 1000,
      });
      await expect(impatient.direct.getMessage(RESULTS, { last_by_subj: subject })).rejects.toThrow(
        /timeout|no responders/i,
      );

      // Intake (not the owner) leaves the stream as it is; the dispatcher turns it on.
      const intake = await connectBus({ ...nats.client("intake"), name: "i", log });
      await ensureJobStreams(intake).finally(() => intake.drain());
      expect((await jsm.streams.info(RESULTS)).config.allow_direct).toBe(false);
      await ensureJobStreams(dispatcher, { owner: true });
      const after = (await jsm.streams.info(RESULTS)).config;
      expect(after.allow_direct).toBe(true);
      expect(after.max_age).toBe(made.max_age);
      const got = await reader.direct.getMessage(RESULTS, { last_by_subj: subject });
      expect(got && text(got.data)).toBe("kept");
    } finally {
      await producer.drain();
      await dispatcher.drain();
    }
  });
});
