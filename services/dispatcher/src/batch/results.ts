import { createHeaders, lastStreamMessage, publishToStream, readKvLatest } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import {
  HEADERS,
  JOB_HEADERS,
  JOB_OUTCOMES,
  JOB_STATUS_BUCKET,
  JOB_STREAMS,
  JobStatusSchema,
  jobKey,
  jobResultSubject,
} from "@zml/contracts";
import type { JobOutcome, JobStatus } from "@zml/contracts";

export interface JobResult {
  account: string;
  jobId: string;
  outcome: JobOutcome;
  status: number;
  routing: string;
  contentType: string;
  body: Uint8Array;
}

/**
 * Stores a job's result at most once. The publish expects the job's result subject to be
 * empty (last subject sequence 0): a redelivered job that raced a late ack finds its result
 * already there and is not recorded twice. Returns false when a result already existed.
 */
export async function recordResult(bus: Bus, result: JobResult): Promise<boolean> {
  const h = createHeaders();
  h.set(JOB_HEADERS.jobId, result.jobId);
  h.set(JOB_HEADERS.outcome, result.outcome);
  h.set(HEADERS.status, String(result.status));
  h.set(HEADERS.contentType, result.contentType);
  if (result.routing) h.set(HEADERS.routing, result.routing);
  const subject = jobResultSubject(result.account, result.jobId);
  const published = await publishToStream(bus, subject, result.body, {
    headers: h,
    msgId: jobKey(result.account, result.jobId),
    onlyIfSubjectEmpty: true,
  });
  return published.stored;
}

/**
 * The outcome and HTTP status of the result already stored for a job, or null when there is
 * none (or it does not say). A redelivered job whose result an earlier delivery stored reports
 * that result, the record, in its status.
 */
export interface StoredOutcome {
  outcome: JobOutcome;
  status: number | null;
}

export async function storedOutcome(
  bus: Bus,
  account: string,
  jobId: string,
): Promise<StoredOutcome | null> {
  const stored = await lastStreamMessage(
    bus,
    JOB_STREAMS.results,
    jobResultSubject(account, jobId),
  );
  const outcome = stored?.headers?.get(JOB_HEADERS.outcome);
  if (!outcome || !(JOB_OUTCOMES as readonly string[]).includes(outcome)) return null;
  const status = Number(stored?.headers?.get(HEADERS.status));
  return { outcome: outcome as JobOutcome, status: Number.isInteger(status) ? status : null };
}

/**
 * A job's status record as the status bucket's leader has it (no replica's older copy), or
 * undefined when there is none (or it is not one ZML wrote). Throws when the leader does not
 * answer.
 */
export async function readStatus(
  bus: Bus,
  account: string,
  jobId: string,
): Promise<JobStatus | undefined> {
  const entry = await readKvLatest(bus, JOB_STATUS_BUCKET, jobKey(account, jobId));
  if (entry?.operation !== "PUT") return undefined;
  let parsed: ReturnType<typeof JobStatusSchema.safeParse>;
  try {
    parsed = JobStatusSchema.safeParse(JSON.parse(Buffer.from(entry.value).toString("utf8")));
  } catch {
    return undefined;
  }
  return parsed.success ? parsed.data : undefined;
}

/** Writes a job's status; status is advisory (the results stream is the record). */
export async function writeStatus(kv: KV, status: Omit<JobStatus, "type">): Promise<void> {
  await kv.put(
    jobKey(status.account, status.job_id),
    JSON.stringify(JobStatusSchema.parse({ type: "job.status.v1", ...status })),
  );
}
