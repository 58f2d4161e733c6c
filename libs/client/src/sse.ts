/** One server-sent event: its `event` name (default `message`) and joined `data` lines. */
export interface SseEvent {
  event: string;
  data: string;
}

/**
 * Splits a byte stream into server-sent events. Handles events split across chunks and
 * `\n`, `\r\n` or `\r` line ends; comment lines and unknown fields are skipped.
 */
export async function* parseSse(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  const take = function* (text: string): Generator<SseEvent> {
    buffer += text;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buffer);
      // A lone trailing \r may be the first half of \r\n: wait for the next chunk.
      if (!m || (m[0] === "\r" && m.index === buffer.length - 1)) return;
      const line = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
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
  };
  for await (const chunk of chunks) yield* take(decoder.decode(chunk, { stream: true }));
  yield* take(`${decoder.decode()}\n\n`);
}
