import type { ReplyWriter } from "@zml/bus";
import { ZmlError } from "@zml/contracts";
import type { NodeDispatcher } from "./http1/http1-pool.ts";
import type { NodeAddressRule, NodeApi } from "@zml/contracts";
import { NodeAddressRefusedError } from "@zml/runtime";
import { dueAnswer, isJsonBody, JsonFramingTracker } from "./answer-check.ts";
import { requestNode } from "./node-answer.ts";
import type { AnswerBody, NodeAnswer } from "./node-answer.ts";
import {
  DONE_EVENT,
  firstEventOf,
  isDoneEvent,
  isResponsesFinalEvent,
  isSealedFinalEvent,
  MAX_HELD_EVENT_BYTES,
  SseEventCutter,
} from "./sse-events.ts";

/** How one attempt against a node ended. */
export type AttemptOutcome =
  /** The node's answer (success or a non-retryable 4xx) went to the client. */
  | { kind: "relayed"; status: number; ttftMs: number | null; retryAfterS: number | null }
  /** Failed before any byte reached the client: the request may go to another node. */
  | {
      kind: "retryable";
      status: number | null;
      /**
       * `auth_failed`: the node's own 401/403, it refused the gateway's credential;
       * `bad_response`: an answer that is not what the call is due (see answer-check.ts).
       */
      outcome: "http_error" | "auth_failed" | "bad_response" | "network_error" | "timeout";
      /** Said by the gateway, never quoting the node's body: it may reach the client. */
      error: string;
      retryAfterS: number | null;
      /** What the node said when it refused the credential (bounded), for the log only. */
      nodeMessage?: string;
      /**
       * The node address policy refused the address dialled (after DNS): nothing was sent.
       * The rule is counted; `error` says why, for the operator.
       */
      addressRefused?: NodeAddressRule;
    }
  /** Failed after bytes reached the client: the client got an explicit error frame. */
  | { kind: "broken"; status: number; error: string; ttftMs: number | null };

export interface NodeCall {
  pool: NodeDispatcher;
  /** The API called, which says how a complete stream ends. */
  api: NodeApi;
  /** Path on the node, including any base path of its endpoint. */
  path: string;
  body: Uint8Array;
  headers: Record<string, string>;
  stream: boolean;
  /**
   * The body is a sealed tier-4 envelope and the answer is sealed too: a stream is complete
   * at its final chunk's event (no `[DONE]` is added, none could be read), and a 410 says the
   * TD holds no key for the session any more.
   */
  sealed: boolean;
  /** Cuts the call: the client went away, the deadline passed, or no first byte in time. */
  signal: AbortSignal;
  /**
   * Called when the node's answer starts (see `attempt-signal.ts`): for a stream at its first
   * event, which is when its head goes to the client; for a plain 2xx when its body comes
   * (whole, when it is held whole); for any other status at its response headers.
   */
  onFirstByte: () => void;
  bodyIdleTimeoutMs: number;
  /** Most bytes a node may answer with; past it the call is cut with `response_too_large`. */
  maxAnswerBytes: number;
  writer: ReplyWriter;
  routing: string;
  startedAt: number;
  clock: () => number;
}

/**
 * Sends the client's bytes to a node unchanged and relays the answer as reply frames.
 * Nothing is retried once a frame has gone out; a stream that ends unfinished (no
 * `finish_reason`, no `[DONE]`), breaks or stalls ends with an explicit error frame, never as
 * a clean, truncated success.
 *
 * Before anything goes out, the answer is the gateway's to judge: a node's own 401/403 (it
 * refused the gateway's credential) and a 2xx that is not what the call is due (no JSON, no
 * SSE; see answer-check.ts) are retryable failures, like a 5xx. A stream's head waits for its
 * first event, within the attempt's first-byte limit: a node that sends its headers at once
 * and its first token late is failed over as if it had sent nothing.
 */
export async function callNode(call: NodeCall): Promise<AttemptOutcome> {
  let response: NodeAnswer;
  try {
    response = await requestNode(call.pool, {
      path: call.path,
      method: "POST",
      headers: call.headers,
      body: call.body,
      signal: call.signal,
      // The first-byte limit is the signal's (a precise timer); undici's would fire up to
      // half a second early or late.
      headersTimeout: 0,
      bodyTimeout: call.bodyIdleTimeoutMs,
    });
  } catch (err) {
    if (err instanceof NodeAddressRefusedError) {
      return {
        kind: "retryable",
        status: null,
        retryAfterS: null,
        outcome: "network_error",
        error: err.message,
        addressRefused: err.rule,
      };
    }
    return { kind: "retryable", status: null, retryAfterS: null, ...classify(err) };
  }
  const status = response.statusCode;
  const retryAfterS = parseRetryAfter(headerValue(response.headers["retry-after"]), call.clock());
  const contentType = headerValue(response.headers["content-type"]);

  if (status >= 500 || (call.sealed && status === 410)) {
    call.onFirstByte();
    await response.body.dump().catch(() => undefined);
    return {
      kind: "retryable",
      status,
      outcome: "http_error",
      error:
        status === 410 ? "the node holds no key for the session (410)" : `node answered ${status}`,
      retryAfterS,
    };
  }
  if (status === 401 || status === 403) return refusedCredential(call, response, status);
  if (status < 200 || status > 299) {
    // A node's 4xx is the client's answer (400, 402, 404, 409, 422, 429…), relayed as it
    // came; so is any status that is neither 2xx nor an error (the routing core retries none).
    call.onFirstByte();
    const ttftMs = call.clock() - call.startedAt;
    const type = contentType ?? "application/json";
    return relayBody(call, response, status, type, ttftMs, retryAfterS, false);
  }
  const due = dueAnswer(contentType, call);
  if (due.kind === "refused") return badResponse(response, status, due.reason);
  if (due.kind === "sse") return relayEvents(call, response, status);
  // A plain answer's headers alone are no answer either (a node may send them at once and its
  // answer much later): the first-byte limit runs on until its body comes (relayBody).
  const ttftMs = call.clock() - call.startedAt;
  return relayBody(call, response, status, due.contentType, ttftMs, retryAfterS, true);
}

/** How much of a node's 401/403 is read for the log: its message, never a whole page. */
const REFUSAL_READ_BYTES = 4096;
const REFUSAL_MESSAGE_CHARS = 200;

/**
 * The node's own 401/403 is about the credential the gateway sent it, never about the
 * client's key (intake checked that): another node may answer, and the node's message goes
 * to the log only. A sealed call's refusal is a sealed envelope: nothing in it is read.
 */
async function refusedCredential(
  call: NodeCall,
  response: NodeAnswer,
  status: number,
): Promise<AttemptOutcome> {
  const said = call.sealed
    ? undefined
    : await readUpTo(response.body, REFUSAL_READ_BYTES).catch(() => undefined);
  if (call.sealed) discard(response);
  const outcome: AttemptOutcome = {
    kind: "retryable",
    status,
    outcome: "auth_failed",
    error: `refused the gateway's credential (${status})`,
    retryAfterS: null,
  };
  const message = said === undefined ? undefined : refusalMessage(said);
  if (message !== undefined) outcome.nodeMessage = message;
  return outcome;
}

/**
 * The message of a refusal: OpenAI's `error.message`, TGI's `error`, a `message`, or else
 * the text itself; on one line, at most {@link REFUSAL_MESSAGE_CHARS} characters.
 */
export function refusalMessage(body: Buffer): string | undefined {
  const text = body.toString("utf8");
  let message: unknown = text;
  try {
    const parsed = JSON.parse(text) as { error?: unknown; message?: unknown };
    const error = parsed.error as { message?: unknown } | string | undefined;
    message =
      typeof error === "string"
        ? error
        : (error?.message ?? parsed.message ?? JSON.stringify(parsed));
  } catch {
    // Not JSON (or cut at the read limit): the text as it came.
  }
  if (typeof message !== "string") message = JSON.stringify(message);
  const line = (message as string).replace(/\s+/g, " ").trim();
  return line === "" ? undefined : line.slice(0, REFUSAL_MESSAGE_CHARS);
}

/** A 2xx the gateway will not relay: nothing went out, so another node may answer. */
function badResponse(response: NodeAnswer, status: number, reason: string): AttemptOutcome {
  discard(response);
  return { kind: "retryable", status, outcome: "bad_response", error: reason, retryAfterS: null };
}

/**
 * Relays an SSE answer event by event: a client never sees half an event, so the error event
 * that ends a broken stream always starts on a clean line. A stream that closes cleanly is
 * complete when it ended with `[DONE]` or a `finish_reason` (many servers send no `[DONE]`).
 *
 * The head goes out with the first event, not with the node's headers: until then the
 * attempt's first-byte limit runs, and whatever goes wrong (the limit passes, the stream
 * breaks or ends, its first lines are no SSE) is a retryable failure, since the client has
 * seen nothing. Comments sent before it (keep-alives while the first token is pending) are
 * held and go out with it, byte for byte. Once the head is out, events are relayed as they
 * come, with no further check or timer.
 */
async function relayEvents(
  call: NodeCall,
  response: NodeAnswer,
  status: number,
): Promise<AttemptOutcome> {
  const contentType = headerValue(response.headers["content-type"]) ?? "text/event-stream";
  const cutter = new SseEventCutter();
  let size = 0;
  let oversize = false;
  /** Time to the first event, once the head went out with it (a property: set in closures). */
  const head: { ttftMs: number | null } = { ttftMs: null };
  /** Comment-only events before the first event, held for the head. */
  const preamble: Buffer[] = [];
  let preambleBytes = 0;
  let refused: string | undefined;
  const start = (events: Buffer) => {
    call.onFirstByte();
    head.ttftMs = call.clock() - call.startedAt;
    call.writer.head(status, contentType, call.routing, { nodeMs: head.ttftMs });
    for (const held of preamble.splice(0)) call.writer.chunk(held);
    call.writer.chunk(events);
  };
  try {
    await response.body.each((chunk) => {
      size += chunk.length;
      if (size > call.maxAnswerBytes) {
        oversize = true;
        return false;
      }
      const events = cutter.push(chunk);
      if (events === null) return true;
      if (head.ttftMs !== null) {
        call.writer.chunk(events);
        return true;
      }
      const first = firstEventOf(events);
      if (first === "event") {
        start(events);
        return true;
      }
      preambleBytes += events.length;
      if (first === "invalid") refused = "answered text/event-stream that is not SSE";
      else if (preambleBytes > MAX_HELD_EVENT_BYTES) {
        refused = `answered ${preambleBytes} bytes of SSE comments before any event`;
      } else preamble.push(events);
      return refused === undefined;
    });
  } catch (err) {
    if (head.ttftMs === null)
      return { kind: "retryable", status, retryAfterS: null, ...classify(err) };
    return broke(call, status, head.ttftMs, err);
  }
  if (refused !== undefined) return badResponse(response, status, refused);
  if (oversize) return tooLarge(call, response, status, head.ttftMs);
  const responses = call.api === "responses";
  const isFinal = call.sealed
    ? isSealedFinalEvent
    : responses
      ? isResponsesFinalEvent
      : isDoneEvent;
  // A last event without its blank line still counts when it is the final one; any other
  // fragment is dropped, so the error event that follows starts on a boundary.
  const unterminated = cutter.takePending();
  const finalUnterminated = unterminated !== undefined && isFinal(unterminated);
  if (finalUnterminated) {
    if (head.ttftMs === null) start(unterminated);
    else call.writer.chunk(unterminated);
  }
  if (head.ttftMs === null) {
    // Closed before its first event: nothing went out, so another node may answer.
    return badResponse(response, status, "stream ended before its first event");
  }
  // The Responses API ends with its own terminal event and sends no `[DONE]`; a sealed
  // stream ends with its final chunk (the client checks that it is one).
  const complete =
    finalUnterminated ||
    (call.sealed || responses ? isFinal(cutter.lastEvent()) : cutter.complete());
  if (!complete) {
    const error =
      unterminated !== undefined
        ? "stream ended in the middle of an event"
        : call.sealed
          ? "sealed stream ended without its final chunk"
          : responses
            ? "stream ended without response.completed"
            : "stream ended without finish_reason or [DONE]";
    call.writer.error(new ZmlError("stream_interrupted", error).toBody(), call.routing);
    return { kind: "broken", status, error, ttftMs: head.ttftMs };
  }
  // Every complete chat or completions stream ZML answers ends with `[DONE]`, as OpenAI's do
  // (and as clients, ZML's SDKs among them, expect); a node's own is passed through, never
  // doubled.
  if (!call.sealed && !responses && !finalUnterminated && !cutter.endedWithDone()) {
    call.writer.chunk(DONE_EVENT);
  }
  call.writer.end();
  return { kind: "relayed", status, ttftMs: head.ttftMs, retryAfterS: null };
}

/**
 * Drops an answer's body unread, and its connection: not drained for the connection's sake,
 * since a node that answers what the gateway refuses may never end its body.
 */
function discard(response: NodeAnswer): void {
  response.body.destroy();
}

/** Reads a body up to about `max` bytes, then stops reading it (the connection is dropped). */
async function readUpTo(body: AnswerBody, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  await body.each((chunk) => {
    chunks.push(chunk);
    size += chunk.length;
    return size < max;
  });
  return Buffer.concat(chunks, size).subarray(0, max);
}

/**
 * An answer up to this size is held whole before any of it is relayed, so a node that fails
 * in the middle of it can still be retried elsewhere; a larger one is relayed as it arrives,
 * so the dispatcher never holds more than this of one answer.
 */
const HELD_ANSWER_BYTES = 1024 * 1024;

/**
 * Relays a non-streamed answer (or a relayed 4xx): whole when small, in pieces when large.
 * Its body is its first byte (`onFirstByte`): a small answer held whole must come whole
 * within the first-byte limit, a large one must start within it.
 * With `mustBeJson` (a 2xx), a body held whole that is not JSON is refused (retryable); one
 * too large to hold is refused when it does not open as JSON, and cut with
 * `bad_upstream_response` when it does not end as JSON.
 */
async function relayBody(
  call: NodeCall,
  response: NodeAnswer,
  status: number,
  contentType: string,
  ttftMs: number,
  retryAfterS: number | null,
  mustBeJson: boolean,
): Promise<AttemptOutcome> {
  const declared = Number(headerValue(response.headers["content-length"]));
  if (declared <= HELD_ANSWER_BYTES && declared <= call.maxAnswerBytes) {
    // The common answer: small, its length declared (either pool fails a body that ends
    // short of it). Read whole in one go, without a stream iterator's promise per chunk.
    let body: Uint8Array;
    try {
      body = await response.body.bytes();
    } catch (err) {
      return { kind: "retryable", status, retryAfterS: null, ...classify(err) };
    }
    call.onFirstByte();
    if (mustBeJson && !isJsonBody(body)) return notJson(status);
    call.writer.full(status, contentType, call.routing, body, {
      nodeMs: call.clock() - call.startedAt,
      retryAfterS: retryAfterS ?? undefined,
    });
    return { kind: "relayed", status, ttftMs, retryAfterS };
  }
  const held: Buffer[] = [];
  const framing = mustBeJson ? new JsonFramingTracker() : undefined;
  let size = 0;
  let relaying = false;
  try {
    /** Why reading stopped early, if it did. */
    let stopped: "too_large" | "not_json" | undefined;
    await response.body.each((chunk) => {
      if (size === 0) call.onFirstByte();
      size += chunk.length;
      if (size > call.maxAnswerBytes) {
        stopped = "too_large";
        return false;
      }
      framing?.push(chunk);
      if (relaying) {
        call.writer.chunk(chunk);
        return true;
      }
      held.push(chunk);
      if (size > HELD_ANSWER_BYTES) {
        if (framing && !framing.opensWell()) {
          stopped = "not_json";
          return false;
        }
        relaying = true;
        call.writer.head(status, contentType, call.routing, {
          nodeMs: call.clock() - call.startedAt,
          retryAfterS: retryAfterS ?? undefined,
        });
        for (const c of held.splice(0)) call.writer.chunk(c);
      }
      return true;
    });
    if (stopped === "too_large") return tooLarge(call, response, status, ttftMs);
    if (stopped === "not_json") return badResponse(response, status, NOT_JSON);
  } catch (err) {
    if (relaying) return broke(call, status, ttftMs, err);
    return { kind: "retryable", status, retryAfterS: null, ...classify(err) };
  }
  if (relaying) {
    if (framing && !framing.closesWell()) {
      const error = `${NOT_JSON}: it does not end as JSON does`;
      call.writer.error(new ZmlError("bad_upstream_response", error).toBody(), call.routing);
      return { kind: "broken", status, error, ttftMs };
    }
    call.writer.end();
    return { kind: "relayed", status, ttftMs, retryAfterS };
  }
  const body = Buffer.concat(held, size);
  if (mustBeJson && !isJsonBody(body)) return notJson(status);
  call.writer.full(status, contentType, call.routing, body, {
    nodeMs: call.clock() - call.startedAt,
    retryAfterS: retryAfterS ?? undefined,
  });
  return { kind: "relayed", status, ttftMs, retryAfterS };
}

const NOT_JSON = "answered a body that is not JSON";

/** A 2xx body read whole that is not JSON: nothing went out, another node may answer. */
function notJson(status: number): AttemptOutcome {
  return { kind: "retryable", status, outcome: "bad_response", error: NOT_JSON, retryAfterS: null };
}

function tooLarge(
  call: NodeCall,
  response: NodeAnswer,
  status: number,
  ttftMs: number | null,
): AttemptOutcome {
  response.body.destroy();
  const error = `node answer is larger than ${call.maxAnswerBytes} bytes`;
  call.writer.error(new ZmlError("response_too_large", error).toBody(), call.routing);
  return { kind: "broken", status, error, ttftMs };
}

function broke(call: NodeCall, status: number, ttftMs: number, err: unknown): AttemptOutcome {
  const { outcome, error } = classify(err);
  const code = outcome === "timeout" ? "upstream_timeout" : "stream_interrupted";
  call.writer.error(new ZmlError(code, `answer from node broke: ${error}`).toBody(), call.routing);
  return { kind: "broken", status, error, ttftMs };
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

/**
 * What a failed node call amounts to. `code` is a string for Node and undici errors, but a
 * number on a DOMException (the deadline's `TimeoutError` has code 23): only strings are read.
 */
export function classify(err: unknown): { outcome: "network_error" | "timeout"; error: string } {
  const e = (err ?? {}) as { code?: unknown; name?: unknown };
  const code = typeof e.code === "string" ? e.code : undefined;
  const name = typeof e.name === "string" ? e.name : undefined;
  const timedOut =
    (code?.includes("TIMEOUT") ?? false) || name === "TimeoutError" || name === "AbortError";
  return { outcome: timedOut ? "timeout" : "network_error", error: code ?? name ?? "error" };
}
