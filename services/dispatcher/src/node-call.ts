import type { ReplyWriter } from "@zml/bus";
import { ZmlError } from "@zml/contracts";
import type { Dispatcher } from "undici";

/** How one attempt against a node ended. */
export type AttemptOutcome =
  /** The node's answer (success or a non-retryable 4xx) went to the client. */
  | { kind: "relayed"; status: number; ttftMs: number | null; retryAfterS: number | null }
  /** Failed before any byte reached the client: the request may go to another node. */
  | {
      kind: "retryable";
      status: number | null;
      outcome: "http_error" | "network_error" | "timeout";
      error: string;
      retryAfterS: number | null;
    }
  /** Failed after bytes reached the client: the client got an explicit error frame. */
  | { kind: "broken"; status: number; error: string; ttftMs: number | null };

export interface NodeCall {
  pool: Dispatcher;
  /** Path on the node, including any base path of its endpoint. */
  path: string;
  body: Uint8Array;
  headers: Record<string, string>;
  stream: boolean;
  signal: AbortSignal;
  headersTimeoutMs: number;
  bodyIdleTimeoutMs: number;
  writer: ReplyWriter;
  routing: string;
  startedAt: number;
  clock: () => number;
}

const DONE_MARKER = Buffer.from("data: [DONE]");

/**
 * Sends the client's bytes to a node unchanged and relays the answer as reply frames.
 * Nothing is retried once a frame has gone out; a stream that ends without `[DONE]`, breaks
 * or stalls ends with an explicit error frame, never as a clean, truncated success.
 */
export async function callNode(call: NodeCall): Promise<AttemptOutcome> {
  let response: Dispatcher.ResponseData;
  try {
    response = await call.pool.request({
      path: call.path,
      method: "POST",
      headers: call.headers,
      body: call.body,
      signal: call.signal,
      headersTimeout: call.headersTimeoutMs,
      bodyTimeout: call.bodyIdleTimeoutMs,
    });
  } catch (err) {
    return { kind: "retryable", status: null, retryAfterS: null, ...classify(err) };
  }
  const status = response.statusCode;
  const retryAfterS = parseRetryAfter(headerValue(response.headers["retry-after"]), call.clock());
  const ttftMs = call.clock() - call.startedAt;
  const contentType = headerValue(response.headers["content-type"]) ?? "application/json";

  if (status >= 500) {
    await response.body.dump().catch(() => undefined);
    return {
      kind: "retryable",
      status,
      outcome: "http_error",
      error: `node answered ${status}`,
      retryAfterS,
    };
  }
  if (!call.stream || status !== 200 || !contentType.startsWith("text/event-stream")) {
    let body: Buffer;
    try {
      body = Buffer.from(await response.body.arrayBuffer());
    } catch (err) {
      return { kind: "retryable", status, retryAfterS: null, ...classify(err) };
    }
    call.writer.full(status, contentType, call.routing, body, call.clock() - call.startedAt);
    return { kind: "relayed", status, ttftMs, retryAfterS };
  }

  call.writer.head(status, contentType, call.routing, ttftMs);
  // Only the last few bytes matter for spotting the terminal `[DONE]` event.
  let tail: Buffer = Buffer.alloc(0);
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      call.writer.chunk(chunk);
      tail = chunk.length >= 32 ? chunk : Buffer.concat([tail, chunk]).subarray(-32);
    }
  } catch (err) {
    const { outcome, error } = classify(err);
    const code = outcome === "timeout" ? "upstream_timeout" : "stream_interrupted";
    call.writer.error(
      new ZmlError(code, `stream from node broke: ${error}`).toBody(),
      call.routing,
    );
    return { kind: "broken", status, error, ttftMs };
  }
  if (tail.indexOf(DONE_MARKER) === -1) {
    const error = "stream ended without [DONE]";
    call.writer.error(new ZmlError("stream_interrupted", error).toBody(), call.routing);
    return { kind: "broken", status, error, ttftMs };
  }
  call.writer.end();
  return { kind: "relayed", status, ttftMs, retryAfterS: null };
}

/** `Retry-After` as seconds (delta-seconds or an HTTP date); null when absent or invalid. */
export function parseRetryAfter(value: string | undefined, now: number): number | null {
  if (!value) return null;
  if (/^\d{1,9}$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - now) / 1000));
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function classify(err: unknown): { outcome: "network_error" | "timeout"; error: string } {
  const e = err as { code?: unknown; name?: string; message?: string };
  // undici's errors carry a string code; a DOMException (the deadline's abort reason) a
  // numeric legacy one, which names nothing.
  const code = typeof e.code === "string" ? e.code : undefined;
  const timedOut =
    (code?.includes("TIMEOUT") ?? false) || e.name === "TimeoutError" || e.name === "AbortError";
  return {
    outcome: timedOut ? "timeout" : "network_error",
    error: code ?? e.name ?? "error",
  };
}
