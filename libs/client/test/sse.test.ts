import { describe, expect, it } from "vitest";
import { parseSse } from "../src/sse.ts";
import type { SseEvent } from "../src/sse.ts";

async function events(parts: string[]): Promise<SseEvent[]> {
  const enc = new TextEncoder();
  async function* chunks() {
    for (const p of parts) yield await Promise.resolve(enc.encode(p));
  }
  const out: SseEvent[] = [];
  for await (const e of parseSse(chunks())) out.push(e);
  return out;
}

describe("parseSse", () => {
  it("reads data and named events, joining multi-line data", async () => {
    expect(
      await events([
        'data: {"a":1}\n\n',
        "event: error\ndata: x\ndata: y\n\n",
        ": comment\n\ndata: [DONE]\n\n",
      ]),
    ).toEqual([
      { event: "message", data: '{"a":1}' },
      { event: "error", data: "x\ny" },
      { event: "message", data: "[DONE]" },
    ]);
  });

  it("reassembles events split anywhere, with any line ending", async () => {
    const text = 'data: {"a":1}\r\n\r\ndata:2\r\rdata: 3\n\n';
    const whole = await events([text]);
    expect(whole.map((e) => e.data)).toEqual(['{"a":1}', "2", "3"]);
    for (let i = 1; i < text.length; i++) {
      expect(await events([text.slice(0, i), text.slice(i)]), `split at ${i}`).toEqual(whole);
    }
  });

  it("keeps multi-byte characters split across chunks", async () => {
    const bytes = new TextEncoder().encode("data: héllo ✓\n\n");
    async function* chunks() {
      for (const b of bytes) yield await Promise.resolve(Uint8Array.of(b));
    }
    const out: SseEvent[] = [];
    for await (const e of parseSse(chunks())) out.push(e);
    expect(out).toEqual([{ event: "message", data: "héllo ✓" }]);
  });

  it("flushes a last event that lacks its blank line", async () => {
    expect(await events(["data: tail"])).toEqual([{ event: "message", data: "tail" }]);
  });
});
