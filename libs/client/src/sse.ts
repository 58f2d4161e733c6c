import { SseEventCutter } from "@zml/contracts/sse";

/** One server-sent event: its `event` name (default `message`) and joined `data` lines. */
export interface SseEvent {
  event: string;
  data: string;
}

/**
 * Splits a byte stream into server-sent events. Handles events split across chunks and
 * `\n`, `\r\n` or `\r` line ends; comment lines and unknown fields are skipped. The bytes are
 * cut into whole events by the gateway's own cutter (bundled from `@zml/contracts/sse`), so
 * only whole events are decoded; a last event that lacks its blank line is read at the end.
 * An event whose lines end in CR alone is read when an LF or CRLF blank line, or the end,
 * follows it (the gateway relays LF and CRLF events only).
 */
export async function* parseSse(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<SseEvent> {
  // No bound on one event: the fields of an event are read only once it is whole.
  const cutter = new SseEventCutter({ maxHeldBytes: Infinity });
  const decoder = new TextDecoder();
  for await (const chunk of chunks) {
    const run = cutter.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    // A run ends on a blank line, so it never ends inside a character or between CR and LF.
    if (run !== null) yield* eventsOf(decoder.decode(run, { stream: true }));
  }
  const rest = cutter.takePending();
  yield* eventsOf(`${decoder.decode(rest)}\n\n`);
}

/** The events in text that ends on a blank line. */
function* eventsOf(text: string): Generator<SseEvent> {
  let event = "";
  let data: string[] = [];
  for (const line of text.split(/\r\n|\r|\n/)) {
    if (line === "") {
      if (data.length > 0) yield { event: event || "message", data: data.join("\n") };
      event = "";
      data = [];
      continue;
    }
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
}
