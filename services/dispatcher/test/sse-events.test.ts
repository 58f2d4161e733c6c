import { describe, expect, it } from "vitest";
import { createSseFramer, isFinalEvent } from "../src/sse-events.ts";

const b = (s: string) => Buffer.from(s);
const text = (buf: Buffer | null) => (buf === null ? null : buf.toString("utf8"));

describe("SSE framer", () => {
  it("passes whole events on and holds a split one back until it is complete", () => {
    const f = createSseFramer();
    expect(text(f.push(b('data: {"a":1}\n\ndata: {"b"')))).toBe('data: {"a":1}\n\n');
    expect(f.push(b(":2"))).toBeNull();
    expect(text(f.push(b("}\n\nevent: x\r\ndata: 3\r\n\r\n")))).toBe(
      'data: {"b":2}\n\nevent: x\r\ndata: 3\r\n\r\n',
    );
    expect(text(f.lastEvent())).toBe("event: x\r\ndata: 3\r\n\r\n");
    expect(f.flush()).toBeNull();
  });

  it("keeps the node's bytes: a chunk of whole events is the same buffer", () => {
    const f = createSseFramer();
    const chunk = b("data: 1\n\ndata: 2\n\n");
    expect(f.push(chunk)).toBe(chunk);
    expect(text(f.lastEvent())).toBe("data: 2\n\n");
  });

  it("lets an oversized event through unfinished rather than hold it without bound", () => {
    const f = createSseFramer(8);
    expect(f.push(b("data: 12"))).toBeNull();
    expect(text(f.push(b("345")))).toBe("data: 12345");
  });

  it("returns an unterminated tail at the end", () => {
    const f = createSseFramer();
    f.push(b("data: 1\n\ndata: [DONE]"));
    expect(text(f.flush())).toBe("data: [DONE]");
    expect(text(f.lastEvent())).toBe("data: [DONE]");
  });
});

describe("final events", () => {
  it("chat and completions end with [DONE]", () => {
    expect(isFinalEvent("chat", b("data: [DONE]\n\n"))).toBe(true);
    expect(isFinalEvent("completions", b("data: [DONE]"))).toBe(true);
    expect(isFinalEvent("chat", b('data: {"choices":[]}\n\n'))).toBe(false);
    expect(isFinalEvent("chat", null)).toBe(false);
  });

  it("the Responses API ends with response.completed, .incomplete or .failed", () => {
    for (const type of ["response.completed", "response.incomplete", "response.failed"]) {
      expect(isFinalEvent("responses", b(`event: ${type}\ndata: {"type":"${type}"}\n\n`))).toBe(
        true,
      );
      // Without an `event:` line the JSON's type says it.
      expect(isFinalEvent("responses", b(`data: {"type":"${type}"}\n\n`))).toBe(true);
    }
    const delta = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta"}';
    expect(isFinalEvent("responses", b(delta))).toBe(false);
    expect(isFinalEvent("responses", b("data: [DONE]\n\n"))).toBe(false);
    expect(isFinalEvent("responses", b("data: {broken\n\n"))).toBe(false);
  });
});
