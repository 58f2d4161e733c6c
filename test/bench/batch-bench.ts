// Batch throughput: jobs published straight to JetStream (as any producer would) and run
// by the dispatchers' batch workers on an instant node, timed until every result is stored.
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connectBus, createHeaders, natsConnectionOf } from "@zml/bus";
import {
  HEADERS,
  JOB_HEADERS,
  JOB_MESSAGE_TYPE,
  JOB_STREAMS,
  jobSubmitSubject,
} from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import type { NatsClientOptions } from "@zml/harness";

export interface BatchFigures {
  jobs: number;
  seconds: number;
  jobsPerSecond: number;
  /** Jobs whose recorded outcome was not `done`. */
  failed: number;
}

const quietLog = { info() {}, warn() {}, error() {} };

export async function measureBatch(
  driver: NatsClientOptions,
  account: string,
  model: string,
  jobs: number,
): Promise<BatchFigures> {
  const bus = await connectBus({ ...driver, name: "zml-bench-batch", log: quietLog });
  try {
    const js = jetstream(natsConnectionOf(bus));
    const jsm = await jetstreamManager(natsConnectionOf(bus));
    const body = JSON.stringify({ model, messages: [{ role: "user", content: "batch" }] });
    const resultsBefore = (await jsm.streams.info(JOB_STREAMS.results)).state.messages;
    const startedAt = performance.now();
    const run = Date.now().toString(36);
    // Publish in windows of 200 outstanding acks: fast, and JetStream confirms every job.
    for (let i = 0; i < jobs; i += 200) {
      await Promise.all(
        Array.from({ length: Math.min(200, jobs - i) }, (_, k) => {
          const id = `bench-${run}-${i + k}`;
          const h = createHeaders();
          h.set(HEADERS.type, JOB_MESSAGE_TYPE);
          h.set(HEADERS.model, model);
          h.set(HEADERS.path, "/v1/chat/completions");
          return js.publish(jobSubmitSubject(account, id), body, { headers: h, msgID: id });
        }),
      );
    }
    await pollUntil(
      async () =>
        (await jsm.streams.info(JOB_STREAMS.results)).state.messages - resultsBefore >= jobs,
      { timeoutMs: 120_000, intervalMs: 50, message: `${jobs} batch results` },
    );
    const seconds = (performance.now() - startedAt) / 1000;
    let failed = 0;
    const consumer = await js.consumers.get(JOB_STREAMS.results, {
      opt_start_seq: resultsBefore + 1,
      deliver_policy: DeliverPolicy.StartSequence,
    });
    const messages = await consumer.fetch({ max_messages: jobs, expires: 10_000 });
    let seen = 0;
    for await (const m of messages) {
      if (m.headers?.get(JOB_HEADERS.outcome) !== "done") failed++;
      if (++seen >= jobs) break;
    }
    return { jobs, seconds, jobsPerSecond: jobs / seconds, failed: failed + (jobs - seen) };
  } finally {
    await bus.drain();
  }
}
