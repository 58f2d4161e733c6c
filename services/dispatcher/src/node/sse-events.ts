// Server-sent events relayed whole: the shared cutter (`@zml/contracts/sse`) sends bytes only
// up to the last blank line, so a client never receives half an event; here a stream's last
// events tell whether it is complete. Nothing here parses JSON: at the end it scans the last
// two events' bytes for a `finish_reason`.

import {
  isDoneEvent,
  SEALED_FINAL_EVENT,
  SseEventCutter as SharedSseEventCutter,
} from "@zml/contracts";

export { isDoneEvent };

// The bound on a held event, for the node call, which also bounds a stream's preamble by it.
export { MAX_HELD_EVENT_BYTES } from "@zml/contracts";

/** The terminal event, for a complete stream whose node sent none. */
export const DONE_EVENT = Buffer.from("data: [DONE]\n\n");
const FINISH_REASON = Buffer.from('"finish_reason"');

const SEALED_FINAL = Buffer.from(`event: ${SEALED_FINAL_EVENT}\n`);

/** Whether an event is a sealed stream's final chunk (`event: final`). */
export function isSealedFinalEvent(event: Buffer | undefined): boolean {
  return event !== undefined && event.subarray(0, SEALED_FINAL.length).equals(SEALED_FINAL);
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
 * The shared cutter (`@zml/contracts/sse`), with what a relayed stream's end tells: `complete`
 * says whether the events sent so far make a finished answer: `[DONE]`, or a `finish_reason`
 * in one of the last two events (the last one may be the usage chunk that follows it).
 */
export class SseEventCutter extends SharedSseEventCutter {
  /** Whether the last event sent was `data: [DONE]`. */
  endedWithDone(): boolean {
    const last = this.lastEvent();
    return last !== undefined && isDoneEvent(last);
  }

  complete(): boolean {
    return this.lastEvents().some((e) => e !== undefined && (isDoneEvent(e) || hasFinishReason(e)));
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
