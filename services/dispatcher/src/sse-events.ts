import type { NodeApi } from "@zml/contracts";

/**
 * Server-sent events from a node are relayed one whole event at a time: a chunk sent on
 * never ends inside an event. If the stream then breaks, the explicit error event intake
 * appends starts on an event boundary, where a client parses it, instead of being glued
 * onto half an event.
 */
export interface SseFramer {
  /**
   * Takes the next bytes from the node; returns the complete events they finish (one
   * buffer, the node's bytes unchanged) or null while the current event is unfinished.
   */
  push(chunk: Buffer): Buffer | null;
  /** At the end of the stream: the bytes of an event the node never terminated, or null. */
  flush(): Buffer | null;
  /** The last complete (or flushed) event, with its trailing blank line; null before one. */
  lastEvent(): Buffer | null;
}

/**
 * An event held back longer than this is passed on unfinished: memory stays bounded and a
 * bus frame stays far below NATS's `max_payload`. Real events are a few hundred bytes; only
 * a Responses API `response.completed`, which repeats the whole answer, gets large.
 */
export const MAX_HELD_EVENT_BYTES = 256 * 1024;

const LF_LF = Buffer.from("\n\n");
const LF_CRLF = Buffer.from("\n\r\n");

/** Index just past the last blank line (`\n\n` or `\r\n\r\n`) in `buf`, or 0 without one. */
function endOfLastEvent(buf: Buffer, before = buf.length): number {
  const lf = buf.lastIndexOf(LF_LF, before - LF_LF.length);
  const crlf = buf.lastIndexOf(LF_CRLF, before - LF_CRLF.length);
  return Math.max(lf === -1 ? 0 : lf + LF_LF.length, crlf === -1 ? 0 : crlf + LF_CRLF.length);
}

/** The last event in `events`, a slice that starts on an event boundary and ends on one. */
function lastEventIn(events: Buffer): Buffer {
  // Skip the slice's own final blank line, then look for the boundary before it.
  const start = endOfLastEvent(events, events.length - 1);
  return events.subarray(start);
}

export function createSseFramer(maxHeldBytes = MAX_HELD_EVENT_BYTES): SseFramer {
  let held: Buffer = Buffer.alloc(0);
  let last: Buffer | null = null;
  return {
    push(chunk) {
      const buf = held.length === 0 ? chunk : Buffer.concat([held, chunk]);
      const end = endOfLastEvent(buf);
      if (end === 0) {
        if (buf.length <= maxHeldBytes) {
          held = buf;
          return null;
        }
        held = Buffer.alloc(0);
        last = buf;
        return buf;
      }
      held = end === buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(end));
      const events = end === buf.length ? buf : buf.subarray(0, end);
      last = lastEventIn(events);
      return events;
    },
    flush() {
      if (held.length === 0) return null;
      const rest = held;
      held = Buffer.alloc(0);
      last = rest;
      return rest;
    },
    lastEvent: () => last,
  };
}

/** Responses API events after which the stream is complete, whatever the outcome. */
const RESPONSES_TERMINAL = new Set([
  "response.completed",
  "response.incomplete",
  "response.failed",
]);

/**
 * Whether `event` is the one a complete stream of `api` ends with: `data: [DONE]` for chat
 * and text completions; `response.completed`, `response.incomplete` or `response.failed`
 * for the Responses API (which sends no `[DONE]`). A stream whose last event is anything
 * else was cut short.
 */
export function isFinalEvent(api: NodeApi, event: Buffer | null): boolean {
  if (event === null) return false;
  let name: string | undefined;
  let data = "";
  for (const line of event.toString("utf8").split(/\r?\n/)) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).trimStart();
  }
  if (api !== "responses") return data === "[DONE]";
  if (name !== undefined) return RESPONSES_TERMINAL.has(name);
  // An event without an `event:` line names its type in the JSON.
  try {
    const type = (JSON.parse(data) as { type?: unknown }).type;
    return typeof type === "string" && RESPONSES_TERMINAL.has(type);
  } catch {
    return false;
  }
}
