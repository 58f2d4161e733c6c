import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { createHeaders, natsConnectionOf } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  HEADERS,
  JOB_HEADERS,
  JOB_MESSAGE_TYPE,
  JOB_STREAMS,
  jobKey,
  jobSubmitSubject,
} from "@zml/contracts";

/** Publishes a job the way any NATS producer would: body bytes plus routing headers. */
export async function submitJob(
  bus: Bus,
  account: string,
  jobId: string,
  model: string,
  extra: Record<string, unknown> = {},
): Promise<{ duplicate: boolean }> {
  const h = createHeaders();
  h.set(HEADERS.type, JOB_MESSAGE_TYPE);
  h.set(HEADERS.model, model);
  h.set(HEADERS.path, "/v1/chat/completions");
  const body = JSON.stringify({
    model,
    messages: [{ role: "user", content: `job ${jobId}` }],
    ...extra,
  });
  const ack = await jetstream(natsConnectionOf(bus)).publish(
    jobSubmitSubject(account, jobId),
    body,
    {
      headers: h,
      msgID: jobKey(account, jobId),
    },
  );
  return { duplicate: ack.duplicate };
}

export interface StoredResult {
  jobId: string;
  outcome: string;
  status: number;
  body: string;
}

/** Every result message in the results stream, in order (duplicates included, if any). */
export async function readResults(bus: Bus): Promise<StoredResult[]> {
  const jsm = await jetstreamManager(natsConnectionOf(bus));
  const info = await jsm.streams.info(JOB_STREAMS.results).catch(() => null);
  const total = info?.state.messages ?? 0;
  if (total === 0) return [];
  const consumer = await jetstream(natsConnectionOf(bus)).consumers.get(JOB_STREAMS.results, {
    deliver_policy: DeliverPolicy.All,
  });
  const out: StoredResult[] = [];
  const messages = await consumer.fetch({ max_messages: total, expires: 5_000 });
  for await (const m of messages) {
    out.push({
      jobId: m.headers?.get(JOB_HEADERS.jobId) ?? "",
      outcome: m.headers?.get(JOB_HEADERS.outcome) ?? "",
      status: Number(m.headers?.get(HEADERS.status)),
      body: m.string(),
    });
    if (out.length >= total) break;
  }
  return out;
}
