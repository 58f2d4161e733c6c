import { createHeaders, publishToStream } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import { HEADERS, JOB_HEADERS, JobStatusSchema, jobKey, jobResultSubject } from "@zml/contracts";
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

/** Writes a job's status; status is advisory (the results stream is the record). */
export async function writeStatus(kv: KV, status: Omit<JobStatus, "type">): Promise<void> {
  await kv.put(
    jobKey(status.account, status.job_id),
    JSON.stringify(JobStatusSchema.parse({ type: "job.status.v1", ...status })),
  );
}
