import { describe, expect, it } from "vitest";
import { SseCutter } from "../src/sse-cutter.ts";

describe("SSE cutter", () => {
  it("cuts whole events at LF or CRLF blank lines, however the bytes are split", () => {
    const wire = 'data: {"n":1}\n\ndata: é\r\n\r\nevent: x\ndata: 2\r\n\ndata: [DONE]\n\n';
    const bytes = Buffer.from(wire);
    for (const step of [1, 2, 3, 7, bytes.length]) {
      const cutter = new SseCutter();
      const events: string[] = [];
      for (let i = 0; i < bytes.length; i += step) {
        for (const e of cutter.push(bytes.subarray(i, i + step))) events.push(e.toString());
      }
      expect(events, `step ${step}`).toEqual([
        'data: {"n":1}\n\n',
        "data: é\r\n\r\n",
        "event: x\ndata: 2\r\n\n",
        "data: [DONE]\n\n",
      ]);
      expect(cutter.hasRest()).toBe(false);
    }
  });

  it("gives events inside one read as views of it, and keeps what is left", () => {
    const read = Buffer.from("data: 1\n\ndata: 2\n\ndata: 3");
    const cutter = new SseCutter();
    const [first] = cutter.push(read);
    expect(first!.buffer).toBe(read.buffer);
    expect(cutter.hasRest()).toBe(true);
    expect(cutter.push(Buffer.from("\n\n")).map(String)).toEqual(["data: 3\n\n"]);
  });
});
