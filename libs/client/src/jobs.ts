import { readApiJson } from "./answer.ts";
import type { RoutingInfo } from "./routing.ts";
import type { CallOptions, Send } from "./transport.ts";
import type { ChatCompletionRequest } from "./types.ts";

export interface JobOptions extends CallOptions {
  /** Your id for the job (letters, digits, `-`, `_`; at most 64): the dedupe key. */
  jobId?: string;
}

/** `POST /v1/jobs` answer. */
export interface JobReceipt {
  object: "job";
  job_id: string;
  status: "queued";
  /** True when a job with this id was already queued within the dedupe window. */
  duplicate: boolean;
}

/** `GET /v1/jobs/{id}` answer. */
export interface JobView {
  object: "job";
  job_id: string;
  status: "queued" | "running" | "done" | "failed" | "expired";
  attempts: number;
  error_code: string | null;
  result: {
    outcome: "done" | "failed" | "expired";
    http_status: number;
    routing: RoutingInfo | null;
    /** The node's answer (a chat completion when done), or the gateway's error. */
    body: unknown;
  } | null;
}

/** Batch jobs (`/v1/jobs`), run on JetStream by the dispatchers' batch workers. */
export interface JobsApi {
  /** Queues one job; the same `jobId` within 10 minutes is the same job (`duplicate`). */
  submit(request: ChatCompletionRequest, options?: JobOptions): Promise<JobReceipt>;
  /** Queues many jobs in order; each gets a receipt. */
  submitMany(requests: ChatCompletionRequest[], options?: CallOptions): Promise<JobReceipt[]>;
  get(jobId: string, options?: CallOptions): Promise<JobView>;
  /**
   * Yields each job once it has finished (`done`, `failed` or `expired`), in the order
   * they finish, polling every `pollMs` (default 500). Ends when all have finished.
   */
  results(jobIds: string[], options?: CallOptions & { pollMs?: number }): AsyncGenerator<JobView>;
}

const FINISHED = new Set(["done", "failed", "expired"]);

export function createJobsApi(send: Send): JobsApi {
  const api: JobsApi = {
    async submit(request, options) {
      const body = { request, ...(options?.jobId ? { job_id: options.jobId } : {}) };
      return (await readApiJson(await send("POST", "/v1/jobs", body, options))) as JobReceipt;
    },
    async submitMany(requests, options) {
      const receipts: JobReceipt[] = [];
      for (const r of requests) receipts.push(await api.submit(r, options));
      return receipts;
    },
    async get(jobId, options) {
      const path = `/v1/jobs/${encodeURIComponent(jobId)}`;
      return (await readApiJson(await send("GET", path, undefined, options))) as JobView;
    },
    async *results(jobIds, options) {
      const open = new Set(jobIds);
      while (open.size > 0) {
        for (const id of [...open]) {
          const view = await api.get(id, options);
          if (FINISHED.has(view.status) && view.result) {
            open.delete(id);
            yield view;
          }
        }
        if (open.size > 0) await sleep(options?.pollMs ?? 500, options?.signal);
      }
    },
  };
  return api;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), reject(signal.reason as Error)), {
      once: true,
    });
  });
}
