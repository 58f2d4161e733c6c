import { z } from "zod";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Batch jobs on JetStream.
 *
 * A job is one inference request. Producers publish it with any NATS client to
 * `zml.jobs.submit.<account>.<job_id>` on the `ZML_JOBS` work-queue stream: the body is the
 * OpenAI request body as bytes (exactly what would be POSTed to `/v1/chat/completions`), the
 * routing fields travel in the same headers as a sync `route.request` (`Zml-Model`,
 * `Zml-Path`, `Zml-Tier`, `Zml-Policy`, `Zml-Fallback-Models`, …) plus
 * `Nats-Msg-Id: <account>.<job_id>`, which makes a second publish of the same job within the
 * dedupe window a no-op.
 *
 * Each job gets at most one result on `zml.jobs.result.<account>.<job_id>` in
 * `ZML_JOB_RESULTS`: the node's response body with `Zml-Job-Outcome`, `Zml-Status` and
 * `Zml-Routing` headers.
 *
 * A job is named by its account *and* its id everywhere (subjects, dedupe, status, results):
 * the same id in two accounts is two jobs, and one account never sees another's.
 */

/** Job ids are subject tokens: letters, digits, `-` and `_`, at most 64. */
export const JOB_ID_PATTERN = NODE_ID_PATTERN;

export const JOB_STREAMS = {
  jobs: "ZML_JOBS",
  results: "ZML_JOB_RESULTS",
  dead: "ZML_JOBS_DEAD",
} as const;

export const JOB_SUBMIT_PREFIX = "zml.jobs.submit";
export const JOB_RESULT_PREFIX = "zml.jobs.result";
/** Poison jobs are copied to `zml.jobs.dead.<account>.<job_id>` after bounded deliveries. */
export const JOB_DEAD_PREFIX = "zml.jobs.dead";
/** Per-job status (queued, running, done, failed, expired). */
export const JOB_STATUS_BUCKET = "zml_job_status";

/** Message type header value of a job. */
export const JOB_MESSAGE_TYPE = "job.v1";

export const JOB_HEADERS = {
  jobId: "Zml-Job-Id",
  outcome: "Zml-Job-Outcome",
} as const;

/** How long JetStream remembers a job id to drop a duplicate publish. */
export const JOB_DEDUPE_WINDOW_MS = 10 * 60_000;

function token(kind: string, value: string): string {
  if (!NODE_ID_PATTERN.test(value)) throw new Error(`invalid ${kind} for a subject: ${value}`);
  return value;
}

export function jobSubmitSubject(account: string, jobId: string): string {
  return `${JOB_SUBMIT_PREFIX}.${token("account", account)}.${token("job id", jobId)}`;
}

/** Every job of one account (a per-account consumer's filter). */
export function accountJobsFilter(account: string): string {
  return `${JOB_SUBMIT_PREFIX}.${token("account", account)}.*`;
}

export function jobDeadSubject(account: string, jobId: string): string {
  return `${JOB_DEAD_PREFIX}.${token("account", account)}.${token("job id", jobId)}`;
}

/** Every result of one account: what its batch producer may read back. */
export function accountResultsFilter(account: string): string {
  return `${JOB_RESULT_PREFIX}.${token("account", account)}.*`;
}

export function jobResultSubject(account: string, jobId: string): string {
  return `${JOB_RESULT_PREFIX}.${token("account", account)}.${token("job id", jobId)}`;
}

/** A job's name across accounts: its `Nats-Msg-Id` and its key in the status bucket. */
export function jobKey(account: string, jobId: string): string {
  return `${token("account", account)}.${token("job id", jobId)}`;
}

export const JOB_OUTCOMES = ["done", "failed", "expired"] as const;
export const JOB_STATUSES = ["queued", "running", ...JOB_OUTCOMES] as const;
export const JobStatusSchema = z.object({
  type: z.literal("job.status.v1"),
  job_id: z.string().regex(JOB_ID_PATTERN),
  account: z.string().regex(NODE_ID_PATTERN),
  status: z.enum(JOB_STATUSES),
  /** HTTP status of the node's answer (or of the gateway's error) once finished. */
  http_status: z.number().int().nullable(),
  /** Error code when failed or expired. */
  error_code: z.string().nullable(),
  /** Node attempts of the latest delivery (up to 3 across nodes and fallback models). */
  attempts: z.number().int().nonnegative(),
  /**
   * How many times JetStream delivered the job (its delivery count). A job is delivered
   * again after a retry, after its dispatcher died, or when a stream leader change made
   * JetStream hand it out again while it ran; only `reexecutions` says it ran again. Absent
   * in statuses written before this field existed, and while the job was never delivered.
   */
  deliveries: z.number().int().nonnegative().optional(),
  /**
   * How many times the job ran again on a node after an execution whose end nobody
   * recorded (its dispatcher died, or stopped while it ran): GPU time paid twice. A retry
   * after all attempts failed is not one. Absent in statuses written before this field
   * existed.
   */
  reexecutions: z.number().int().nonnegative().optional(),
  /**
   * The dispatcher replica holding the job while it is `queued` (waiting for capacity) or
   * `running`: a redelivery of the job waits for that replica while it lives, instead of
   * running it a second time. Absent once nobody holds it (a retry, a hand-back, the end).
   */
  worker: z.string().min(1).max(128).optional(),
  updated_at: z.number().int(),
});
export type JobStatus = z.infer<typeof JobStatusSchema>;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];
