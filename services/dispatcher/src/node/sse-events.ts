// Server-sent events relayed whole: bytes go out only up to the last blank line, so a client
// never receives half an event, and a stream's last events tell whether it is complete.
// Nothing here parses JSON: it scans bytes for the blank line and, at the end, for a
// `finish_reason` in the last two events.

import { SEALED_FINAL_EVENT } from "@zml/contracts";

const LF_LF = Buffer.from("\n\n");
/** The end of `\r\n\r\n` (or `\n\r\n`): a CRLF blank line after a line end. */
const LF_CRLF = Buffer.from("\n\r\n");
const DONE = Buffer.from("data: [DONE]");
/** The terminal event, for a complete stream whose node sent none. */
export const DONE_EVENT = Buffer.from("data: [DONE]\n\n");
const FINISH_REASON = Buffer.from('"finish_reason"');

/**
 * Index just past the last blank line that ends at or before `limit`, or -1. Blank lines end
 * in LF or CRLF (every serving framework's); CR-only line ends are not recognised.
 */
export function lastBoundaryEnd(buf: Uint8Array, limit = buf.length): number {
  const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  const lf = limit >= 2 ? b.lastIndexOf(LF_LF, limit - 2) : -1;
  const crlf = limit >= 3 ? b.lastIndexOf(LF_CRLF, limit - 3) : -1;
  return Math.max(lf === -1 ? -1 : lf + 2, crlf === -1 ? -1 : crlf + 3);
}

/** Where the last event of the whole events in `run[0, end)` starts. */
function lastEventStart(run: Buffer, end: number): number {
  return Math.max(0, lastBoundaryEnd(run, end - 2));
}

const SEALED_FINAL = Buffer.from(`event: ${SEALED_FINAL_EVENT}\n`);

/** Whether an event is a sealed stream's final chunk (`event: final`). */
export function isSealedFinalEvent(event: Buffer | undefined): boolean {
  return event !== undefined && event.subarray(0, SEALED_FINAL.length).equals(SEALED_FINAL);
}

/** Whether an event is `data: [DONE]`. */
export function isDoneEvent(event: Buffer | undefined): boolean {
  return event !== undefined && event.indexOf(DONE) !== -1 && event.length <= DONE.length + 4;
}

/** Whether an event carries a `finish_reason` that is a string (not `null`). */
export function hasFinishReason(event: Buffer): boolean {
  for (let at = event.indexOf(FINISH_REASON); at !== -1;) {
    let i = at + FINISH_REASON.length;
    while (event[i] === 0x20) i++;
    if (event[i] === 0x3a /* : */) {
      i++;
      while (event[i] === 0x20) i++;
      if (event[i] === 0x22 /* " */) return true;
    }
    at = event.indexOf(FINISH_REASON, at + 1);
  }
  return false;
}

/**
 * Cuts a byte stream into runs of whole SSE events. `push` returns the bytes that end on an
 * event boundary (or null) and keeps the rest until its blank line arrives; what is held when
 * the stream breaks is dropped, never sent. `complete` says whether the events sent so far
 * make a finished answer: `[DONE]`, or a `finish_reason` in one of the last two events (the
 * last one may be the usage chunk that follows it).
 */
/**
 * An event held back longer than this is passed on unfinished, so memory stays bounded. Real
 * events are a few hundred bytes; only a Responses API `response.completed`, which repeats
 * the whole answer, gets large.
 */
export const MAX_HELD_EVENT_BYTES = 256 * 1024;

export class SseEventCutter {
  private held: Buffer[] = [];
  private heldBytes = 0;
  /**
   * The last two runs of whole events sent: the last two events are in them. They are cut
   * out only when asked for (at the stream's end), so a read costs no allocation for them.
   */
  private lastRun: Buffer | undefined;
  private runBefore: Buffer | undefined;

  push(chunk: Buffer): Buffer | null {
    let end = lastBoundaryEnd(chunk);
    if (end === -1 && this.heldBytes > 0) end = this.straddlingEnd(chunk);
    if (end === -1) {
      this.hold(chunk);
      if (this.heldBytes <= MAX_HELD_EVENT_BYTES) return null;
      // An "event" this long is no event: pass it on rather than hold it without bound.
      return this.takePending() ?? null;
    }
    const out =
      this.heldBytes === 0
        ? end === chunk.length
          ? chunk // the common read: whole events only, passed on as it came
          : chunk.subarray(0, end)
        : Buffer.concat([...this.held, chunk.subarray(0, end)], this.heldBytes + end);
    this.held = [];
    this.heldBytes = 0;
    if (end < chunk.length) this.hold(chunk.subarray(end));
    this.runBefore = this.lastRun;
    this.lastRun = out;
    return out;
  }

  /** Takes the bytes of an unfinished event held back (at the end of a stream). */
  takePending(): Buffer | undefined {
    if (this.heldBytes === 0) return undefined;
    const rest = Buffer.concat(this.held, this.heldBytes);
    this.held = [];
    this.heldBytes = 0;
    return rest;
  }

  /** Bytes of an unfinished event held back. */
  get pending(): number {
    return this.heldBytes;
  }

  /** The last whole event sent, if any. */
  lastEvent(): Buffer | undefined {
    return this.lastTwo()[0];
  }

  /** Whether the last event sent was `data: [DONE]`. */
  endedWithDone(): boolean {
    const last = this.lastEvent();
    return last !== undefined && isDoneEvent(last);
  }

  complete(): boolean {
    return this.lastTwo().some((e) => e !== undefined && (isDoneEvent(e) || hasFinishReason(e)));
  }

  private hold(bytes: Buffer): void {
    this.held.push(bytes);
    this.heldBytes += bytes.length;
  }

  /** A blank line split across the held bytes and the new chunk (at most 3 + 3 bytes). */
  private straddlingEnd(chunk: Buffer): number {
    const tailParts: Buffer[] = [];
    let tailBytes = 0;
    for (let i = this.held.length - 1; i >= 0 && tailBytes < 3; i--) {
      tailParts.unshift(this.held[i]!);
      tailBytes += this.held[i]!.length;
    }
    const heldTail = Buffer.concat(tailParts).subarray(-3);
    const seam = Buffer.concat([heldTail, chunk.subarray(0, 3)]);
    const end = lastBoundaryEnd(seam);
    return end > heldTail.length ? end - heldTail.length : -1;
  }

  /** The last two events sent, last first (either may be missing). */
  private lastTwo(): [Buffer | undefined, Buffer | undefined] {
    const run = this.lastRun;
    if (run === undefined) return [undefined, undefined];
    const start = lastEventStart(run, run.length);
    const last = run.subarray(start);
    if (start > 0) return [last, run.subarray(lastEventStart(run, start), start)];
    const before = this.runBefore;
    return [last, before?.subarray(lastEventStart(before, before.length))];
  }
}

/**
 * What a run of whole events that opens a stream holds: `event` when an event with data
 * comes in it (what an SSE client dispatches: the first token, a Responses API event, a
 * sealed stream's head), `comments` when it holds only comments or fields without data
 * (keep-alives a node sends while its first token is pending), `invalid` when a line is
 * no SSE field at all (an HTML page, or text, sent as `text/event-stream`). Reads lines up
 * to the end of the first event with data; meant for the opening run(s) of a stream only.
 */
export function firstEventOf(run: Buffer): "event" | "comments" | "invalid" {
  let sawData = false;
  // A stream may open with a UTF-8 byte order mark, which SSE clients skip.
  const start = run[0] === 0xef && run[1] === 0xbb && run[2] === 0xbf ? 3 : 0;
  for (let at = start; at < run.length;) {
    let end = run.indexOf(0x0a, at);
    if (end === -1) end = run.length;
    const lineEnd = end > at && run[end - 1] === 0x0d ? end - 1 : end;
    if (lineEnd === at) {
      if (sawData) return "event";
    } else if (run[at] !== 0x3a /* : a comment */) {
      const field = fieldOf(run, at, lineEnd);
      if (field === undefined) return "invalid";
      if (field === "data") sawData = true;
    }
    at = end + 1;
  }
  return sawData ? "event" : "comments";
}

const SSE_FIELDS = new Set(["data", "event", "id", "retry"]);

/** The SSE field a line names (up to its colon), if it is one of the four. */
function fieldOf(run: Buffer, start: number, end: number): string | undefined {
  const colon = run.subarray(start, end).indexOf(0x3a);
  const nameEnd = colon === -1 ? end : start + colon;
  if (nameEnd - start > 5) return undefined;
  const name = run.toString("latin1", start, nameEnd);
  return SSE_FIELDS.has(name) ? name : undefined;
}

/** Responses API events after which the stream is complete, whatever the outcome. */
const RESPONSES_TERMINAL = new Set([
  "response.completed",
  "response.incomplete",
  "response.failed",
]);

/**
 * Whether `event` ends a Responses API stream (which sends no `[DONE]`): its `event:` line,
 * or the `type` its JSON names, is `response.completed`, `response.incomplete` or
 * `response.failed`. Read only for the last event of a stream.
 */
export function isResponsesFinalEvent(event: Buffer | undefined): boolean {
  if (event === undefined) return false;
  let name: string | undefined;
  let data = "";
  for (const line of event.toString("utf8").split(/\r?\n/)) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).trimStart();
  }
  if (name !== undefined) return RESPONSES_TERMINAL.has(name);
  try {
    const type = (JSON.parse(data) as { type?: unknown }).type;
    return typeof type === "string" && RESPONSES_TERMINAL.has(type);
  } catch {
    return false;
  }
}
