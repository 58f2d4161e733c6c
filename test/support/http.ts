import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import type { RoutingInfo } from "@zml/contracts";
import { request } from "undici";
import { authHeaders, MODEL } from "./stack.ts";

export interface ChatResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  routing: RoutingInfo | undefined;
}

/** POSTs a chat completion to the gateway and reads the whole answer. */
export async function postChat(intakeUrl: string, body: unknown): Promise<ChatResult> {
  const res = await request(`${intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  const header = res.headers[ROUTING_HTTP_HEADER];
  return {
    status: res.statusCode,
    headers: res.headers,
    text,
    routing: typeof header === "string" ? parseRoutingHeader(header) : undefined,
  };
}

export function chat(model: string, extra: Record<string, unknown> = {}) {
  return { model, messages: [{ role: "user", content: "Say hello" }], ...extra };
}

/** What one `POST /v1/jobs` got: its status (0: no answer within 30 s) and `retry-after`. */
export interface JobPostAnswer {
  status: number;
  retryAfter: string | null;
}

/**
 * Submits a one-message chat job to an intake once, as a client would (the job id makes a
 * second try of the same job idempotent). A refused connection or no answer is status 0, so
 * that tests of failover can count what was lost with a stopped intake.
 */
export async function postJob(intakeUrl: string, jobId: string): Promise<JobPostAnswer> {
  try {
    const res = await fetch(`${intakeUrl}/v1/jobs`, {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify({
        job_id: jobId,
        request: { model: MODEL, messages: [{ role: "user", content: jobId }] },
      }),
      signal: AbortSignal.timeout(30_000),
    });
    await res.text();
    return { status: res.status, retryAfter: res.headers.get("retry-after") };
  } catch {
    return { status: 0, retryAfter: null };
  }
}
