// How a job's execution maps to what happens to the job: a final outcome to record, or a
// retry (redelivery by JetStream). Pure.
import { ZmlError } from "@zml/contracts";
import type { JobOutcome } from "@zml/contracts";
import type { ExecutionResult } from "../route/execution.ts";
import type { CollectedReply } from "./collecting-writer.ts";

/** What the job's result (or its redelivery) carries. */
interface JobAnswer {
  status: number;
  routing: string;
  contentType: string;
  body: Uint8Array;
  errorCode: string | null;
  attempts: number;
}

export type FinalOutcome = JobAnswer & { kind: "final"; outcome: JobOutcome };
export type JobFinish = FinalOutcome | (JobAnswer & { kind: "retry" });

/** No capacity now, or no usable node now: the job waits, up to its policy's limit. */
export function waitsForCapacity(error: ZmlError): boolean {
  return (
    error.code === "saturated" ||
    error.code === "no_node_available" ||
    error.code === "no_usable_node"
  );
}

/** A finished execution as a job outcome; a rejection is recorded as `rejectedAs`. */
export function jobFinishOf(
  result: ExecutionResult,
  reply: CollectedReply,
  rejectedAs: JobOutcome,
): JobFinish {
  const body = Buffer.concat(reply.chunks);
  if (result.kind === "relayed") {
    const ok = result.status >= 200 && result.status < 300;
    return {
      kind: "final",
      outcome: ok ? "done" : "failed",
      status: result.status,
      routing: result.routing,
      contentType: reply.contentType,
      body,
      errorCode: ok ? null : `http_${result.status}`,
      attempts: result.attempts,
    };
  }
  if (result.kind === "broken" || result.kind === "failed") {
    // Nothing reached a client: a broken stream or exhausted attempts may succeed later.
    const error =
      result.kind === "failed" ? result.error : new ZmlError("stream_interrupted", "stream broke");
    return { ...errorOutcome(error, "failed", result.attempts), kind: "retry" };
  }
  if (result.kind === "rejected") return errorOutcome(result.error, rejectedAs, 0);
  return errorOutcome(new ZmlError("internal_error", "job cancelled"), "failed", 0);
}

/** A final outcome whose result body is the error. */
export function errorOutcome(error: ZmlError, outcome: JobOutcome, attempts: number): FinalOutcome {
  return {
    kind: "final",
    outcome,
    status: error.status,
    routing: "",
    contentType: "application/json",
    body: Buffer.from(JSON.stringify(error.toBody())),
    errorCode: error.code,
    attempts,
  };
}
