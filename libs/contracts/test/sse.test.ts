// The shared SSE cutter: only whole events go out, however the bytes are split, and the
// events of a run are views of it.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  countEvents,
  lastBoundaryEnd,
  MAX_HELD_EVENT_BYTES,
  SseEventCutter,
  splitEvents,
} from "../src/sse.ts";

const b = (s: string) => Buffer.from(s);
const token = (t: string) =>
  `data: {"choices":[{"delta":{"content":"${t}"},"finish_reason":null}]}\n\n`;
const finish = 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n';
const usage = 'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n';
/** LF and CRLF events, a multi-byte character, and a blank line of CR LF LF. */
const mixed = 'data: {"n":1}\n\ndata: é\r\n\r\nevent: x\ndata: 2\r\n\ndata: [DONE]\n\n';

/** The pieces of `text`'s bytes cut at the given offsets. */
function cut(text: string, cuts: number[]): Buffer[] {
  const bytes = b(text);
  const at = [...new Set(cuts)].filter((c) => c > 0 && c < bytes.length).sort((x, y) => x - y);
  return [0, ...at].map((from, i) => bytes.subarray(from, at[i] ?? bytes.length));
}

describe("lastBoundaryEnd", () => {
  it("finds the end of the last LF or CRLF blank line", () => {
    expect(lastBoundaryEnd(b("data: a\n\ndata: b"))).toBe(9);
    expect(lastBoundaryEnd(b("data: a\r\n\r\ndata: b"))).toBe(11);
    expect(lastBoundaryEnd(b("data: a\ndata: b\n"))).toBe(-1);
    expect(lastBoundaryEnd(b("data: a\n\ndata: b\n\n"), 17)).toBe(9);
    // CR-only line ends are not blank lines here.
    expect(lastBoundaryEnd(b("data: a\r\r"))).toBe(-1);
  });

  it("reads a plain Uint8Array as well as a Buffer", () => {
    expect(lastBoundaryEnd(new TextEncoder().encode("data: a\n\ndata: b"))).toBe(9);
  });
});

describe("SseEventCutter", () => {
  it("sends whole events at once and holds a partial one until its blank line", () => {
    const cutter = new SseEventCutter();
    expect(cutter.push(b(token("a") + 'data: {"cho'))?.toString()).toBe(token("a"));
    expect(cutter.pending).toBeGreaterThan(0);
    expect(cutter.push(b('ices":[]}\n'))).toBeNull();
    expect(cutter.push(b("\n"))?.toString()).toBe('data: {"choices":[]}\n\n');
    expect(cutter.pending).toBe(0);
  });

  it("passes a read of whole events on as it came, without a copy", () => {
    const cutter = new SseEventCutter();
    const read = b(token("a") + token("b"));
    expect(cutter.push(read)).toBe(read);
    const partial = b(token("c") + "data: {");
    expect(cutter.push(partial)?.buffer).toBe(partial.buffer);
  });

  it("sends every byte of whole events, in order, however the stream is split", () => {
    for (const stream of [token("a") + token("b") + finish + usage + "data: [DONE]\n\n", mixed]) {
      fc.assert(
        fc.property(fc.array(fc.nat({ max: b(stream).length }), { maxLength: 12 }), (cuts) => {
          const cutter = new SseEventCutter();
          const runs = cut(stream, cuts).map((piece) => cutter.push(piece));
          for (const run of runs) if (run !== null) expect(lastBoundaryEnd(run)).toBe(run.length);
          expect(Buffer.concat(runs.filter((r) => r !== null)).toString()).toBe(stream);
          expect(cutter.pending).toBe(0);
        }),
      );
    }
  });

  it("holds the unfinished last event of a stream cut short, for the caller to take", () => {
    const cutter = new SseEventCutter();
    expect(cutter.push(b(token("a")))?.toString()).toBe(token("a"));
    expect(cutter.push(b(token("b").slice(0, 20)))).toBeNull();
    expect(cutter.pending).toBe(20);
    expect(cutter.peekPending()?.toString()).toBe(token("b").slice(0, 20));
    expect(cutter.pending).toBe(20);
    expect(cutter.takePending()?.toString()).toBe(token("b").slice(0, 20));
    expect(cutter.pending).toBe(0);
    expect(cutter.takePending()).toBeUndefined();
  });

  it("joins a CRLF blank line split across reads", () => {
    const crlf = 'data: {"finish_reason":"length"}\r\n\r\n';
    for (let at = 1; at < crlf.length; at++) {
      const cutter = new SseEventCutter();
      const out = [cutter.push(b(crlf.slice(0, at))), cutter.push(b(crlf.slice(at)))];
      expect(out.map((r) => r?.toString() ?? "").join(""), `split at ${at}`).toBe(crlf);
    }
  });

  it("knows the last two events sent, across runs", () => {
    const cutter = new SseEventCutter();
    expect(cutter.lastEvents()).toEqual([undefined, undefined]);
    cutter.push(b(token("a") + finish));
    expect(cutter.lastEvents().map(String)).toEqual([finish, token("a")]);
    cutter.push(b(usage));
    expect(cutter.lastEvents().map(String)).toEqual([usage, finish]);
    expect(cutter.lastEvent()?.toString()).toBe(usage);
  });
});

describe("SseEventCutter bound", () => {
  it("passes an event longer than MAX_HELD_EVENT_BYTES on rather than hold it", () => {
    const cutter = new SseEventCutter();
    const big = Buffer.alloc(MAX_HELD_EVENT_BYTES + 1, "x");
    expect(cutter.push(big)?.length).toBe(big.length);
    expect(cutter.pending).toBe(0);
  });

  it("holds an event however long when told to", () => {
    const cutter = new SseEventCutter({ maxHeldBytes: Infinity });
    const big = Buffer.alloc(MAX_HELD_EVENT_BYTES + 1, "x");
    expect(cutter.push(big)).toBeNull();
    expect(cutter.push(b("\n\n"))?.length).toBe(big.length + 2);
  });
});

describe("splitEvents", () => {
  it("cuts whole events at LF or CRLF blank lines, however the bytes were split", () => {
    const events = [
      'data: {"n":1}\n\n',
      "data: é\r\n\r\n",
      "event: x\ndata: 2\r\n\n",
      "data: [DONE]\n\n",
    ];
    fc.assert(
      fc.property(fc.array(fc.nat({ max: b(mixed).length }), { maxLength: 12 }), (cuts) => {
        const cutter = new SseEventCutter({ maxHeldBytes: Infinity });
        const out = cut(mixed, cuts).flatMap((piece) => {
          const run = cutter.push(piece);
          return run === null ? [] : splitEvents(run).map(String);
        });
        expect(out).toEqual(events);
      }),
    );
  });

  it("gives the events as views of the run", () => {
    const run = b("data: 1\n\ndata: 2\n\n");
    const [first, second] = splitEvents(run);
    expect(first!.buffer).toBe(run.buffer);
    expect(second!.toString()).toBe("data: 2\n\n");
  });

  it("keeps a stray blank line with the event before it", () => {
    expect(splitEvents(b("data: 1\n\n\ndata: 2\n\n")).map(String)).toEqual([
      "data: 1\n\n",
      "\ndata: 2\n\n",
    ]);
    expect(splitEvents(b("data: [DONE]\n\n\n")).map(String)).toEqual(["data: [DONE]\n\n\n"]);
  });
});

describe("countEvents", () => {
  it("counts LF and CRLF blank lines, not single line ends", () => {
    const b = (s: string) => Buffer.from(s);
    expect(countEvents(b(""))).toBe(0);
    expect(countEvents(b("data: a\n"))).toBe(0);
    expect(countEvents(b("data: a\n\n"))).toBe(1);
    expect(countEvents(b("event: x\ndata: a\n\ndata: b\r\n\r\n: c\n\n"))).toBe(3);
  });
});
