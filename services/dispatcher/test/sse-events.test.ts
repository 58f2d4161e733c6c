// What a relayed stream's events tell the dispatcher: whether the stream is complete, and what
// its opening run holds. The cutting itself is tested with the shared cutter (libs/contracts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  firstEventOf,
  hasFinishReason,
  isDoneEvent,
  isResponsesFinalEvent,
  SseEventCutter,
} from "../src/node/sse-events.ts";

const b = (s: string) => Buffer.from(s);
const token = (t: string) =>
  `data: {"choices":[{"delta":{"content":"${t}"},"finish_reason":null}]}\n\n`;
const finish = 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n';
const usage = 'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n';

function run(chunks: string[]) {
  const cutter = new SseEventCutter();
  const out = chunks.map((c) => cutter.push(b(c))?.toString() ?? "").join("");
  return { out, cutter };
}

describe("SseEventCutter", () => {
  it("is complete, whole events sent in order, however the stream is split", () => {
    const stream = token("a") + token("b") + finish + usage + "data: [DONE]\n\n";
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: stream.length - 1 }), { maxLength: 12 }),
        (cuts) => {
          const at = [...new Set(cuts)].sort((x, y) => x - y);
          const pieces = [0, ...at].map((from, i) => stream.slice(from, at[i] ?? stream.length));
          const { out, cutter } = run(pieces);
          expect(out).toBe(stream);
          expect(cutter.complete()).toBe(true);
        },
      ),
    );
  });

  it("never sends the unfinished last event of a stream cut short", () => {
    const { out, cutter } = run([token("a"), token("b").slice(0, 20)]);
    expect(out).toBe(token("a"));
    expect(cutter.pending).toBe(20);
    expect(cutter.complete()).toBe(false);
  });

  it("is complete after a finish_reason, with the usage chunk after it and no [DONE]", () => {
    expect(run([token("a"), finish]).cutter.complete()).toBe(true);
    expect(run([token("a"), finish, usage]).cutter.complete()).toBe(true);
    expect(run([token("a") + finish + usage]).cutter.complete()).toBe(true);
    expect(run([token("a"), token("b")]).cutter.complete()).toBe(false);
  });

  it("is complete with [DONE], and CRLF events work the same", () => {
    expect(run([token("a"), "data: [DONE]\n\n"]).cutter.complete()).toBe(true);
    const crlf = 'data: {"finish_reason":"length"}\r\n\r\n';
    const { out, cutter } = run([crlf.slice(0, 30), crlf.slice(30)]);
    expect(out).toBe(crlf);
    expect(cutter.complete()).toBe(true);
  });
});

describe("event tests", () => {
  it("reads finish_reason as set only when it is a string", () => {
    expect(hasFinishReason(b(finish))).toBe(true);
    expect(hasFinishReason(b('data: {"finish_reason" : "length"}\n\n'))).toBe(true);
    expect(hasFinishReason(b(token("x")))).toBe(false);
    // Text that mentions it, as a model's JSON output would (escaped), does not count.
    expect(hasFinishReason(b(token('\\"finish_reason\\":\\"stop\\"')))).toBe(false);
    expect(isDoneEvent(b("data: [DONE]\n\n"))).toBe(true);
    expect(isDoneEvent(b(token("[DONE]")))).toBe(false);
  });
});

describe("isResponsesFinalEvent", () => {
  const bytes = (s: string) => Buffer.from(s);
  it("is true for response.completed, .incomplete and .failed, by event line or JSON type", () => {
    for (const type of ["response.completed", "response.incomplete", "response.failed"]) {
      expect(isResponsesFinalEvent(bytes(`event: ${type}\ndata: {"type":"${type}"}\n\n`))).toBe(
        true,
      );
      expect(isResponsesFinalEvent(bytes(`data: {"type":"${type}"}\n\n`))).toBe(true);
    }
  });

  it("is false for any other event, [DONE], broken JSON or no event", () => {
    const delta = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta"}';
    expect(isResponsesFinalEvent(bytes(delta))).toBe(false);
    expect(isResponsesFinalEvent(bytes("data: [DONE]\n\n"))).toBe(false);
    expect(isResponsesFinalEvent(bytes("data: {broken\n\n"))).toBe(false);
    expect(isResponsesFinalEvent(undefined)).toBe(false);
  });
});

describe("firstEventOf", () => {
  it("finds an event with data, whatever comes before it on the same run", () => {
    expect(firstEventOf(b(token("a")))).toBe("event");
    expect(firstEventOf(b(": keep-alive\n\n" + token("a")))).toBe("event");
    expect(firstEventOf(b("event: response.created\ndata: {}\n\n"))).toBe("event");
    expect(firstEventOf(b("id: 1\r\nretry: 500\r\ndata: x\r\n\r\n"))).toBe("event");
    // A field without a value is still the field.
    expect(firstEventOf(b("data\n\n"))).toBe("event");
    // A byte order mark may open a stream.
    expect(firstEventOf(b("\uFEFFdata: x\n\n"))).toBe("event");
  });

  it("tells keep-alives (comments, fields without data) from an event", () => {
    expect(firstEventOf(b(": ping\n\n"))).toBe("comments");
    expect(firstEventOf(b(": ping\n\n:\n\nretry: 1000\n\n"))).toBe("comments");
    expect(firstEventOf(b("event: ping\n\n"))).toBe("comments");
  });

  it("calls lines that are no SSE field invalid: HTML or text sent as an event stream", () => {
    expect(firstEventOf(b("<html><body>502 Bad Gateway</body></html>\n\n"))).toBe("invalid");
    expect(firstEventOf(b("Internal error\n\n"))).toBe("invalid");
    expect(firstEventOf(b('{"choices":[]}\n\n'))).toBe("invalid");
    expect(firstEventOf(b("datum: x\n\n"))).toBe("invalid");
  });

  it("reads no further than the first event with data", () => {
    expect(firstEventOf(b(token("a") + "<html>\n\n"))).toBe("event");
  });
});
