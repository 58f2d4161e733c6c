// What a node's 2xx answer must be before it is relayed: the media type due for the call,
// JSON bodies by their framing and (when small) a parse.
import fc from "fast-check";
import { SEALED_RESPONSE_MEDIA_TYPE } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import {
  dueAnswer,
  hasJsonFraming,
  isJsonBody,
  JsonFramingTracker,
  mediaTypeOf,
  PARSED_JSON_MAX_BYTES,
} from "../src/node/answer-check.ts";

const clear = { stream: false, sealed: false };
const clearStream = { stream: true, sealed: false };
const sealed = { stream: false, sealed: true };
const sealedStream = { stream: true, sealed: true };
const b = (s: string) => Buffer.from(s);

describe("dueAnswer", () => {
  it("wants JSON for a plain call and SSE for a stream", () => {
    expect(dueAnswer("application/json", clear)).toEqual({
      kind: "json",
      contentType: "application/json",
    });
    expect(dueAnswer("Application/JSON; charset=utf-8", clear)).toEqual({
      kind: "json",
      contentType: "Application/JSON; charset=utf-8",
    });
    expect(dueAnswer("text/event-stream; charset=utf-8", clearStream)).toEqual({ kind: "sse" });
  });

  it("takes an answer without a type as JSON, to be judged by its body", () => {
    expect(dueAnswer(undefined, clear)).toEqual({ kind: "json", contentType: "application/json" });
    expect(dueAnswer(undefined, clearStream).kind).toBe("refused");
    expect(dueAnswer(undefined, sealed).kind).toBe("refused");
  });

  it("refuses any other type, naming it and what is due", () => {
    expect(dueAnswer("text/html", clear)).toEqual({
      kind: "refused",
      reason: "answered text/html where application/json is due",
    });
    expect(dueAnswer("text/event-stream", clear)).toMatchObject({ kind: "refused" });
    expect(dueAnswer("application/json", clearStream)).toEqual({
      kind: "refused",
      reason: "answered application/json where SSE is due",
    });
    expect(dueAnswer("text/plain", clearStream)).toMatchObject({ kind: "refused" });
    // A hostile node's header is not quoted unless it is a plain media type.
    expect(dueAnswer(`text/${"x".repeat(80)}`, clear)).toMatchObject({
      reason: "answered an unreadable content type where application/json is due",
    });
    expect(dueAnswer("<script>/x", clear)).toMatchObject({
      reason: "answered an unreadable content type where application/json is due",
    });
  });

  it("wants the sealed media type for a sealed call, and takes SSE for a sealed stream", () => {
    expect(dueAnswer(SEALED_RESPONSE_MEDIA_TYPE, sealed)).toEqual({
      kind: "json",
      contentType: SEALED_RESPONSE_MEDIA_TYPE,
    });
    expect(dueAnswer("application/json", sealed)).toEqual({
      kind: "refused",
      reason: `answered application/json where ${SEALED_RESPONSE_MEDIA_TYPE} is due`,
    });
    expect(dueAnswer("text/event-stream", sealed)).toMatchObject({ kind: "refused" });
    expect(dueAnswer("text/event-stream", sealedStream)).toEqual({ kind: "sse" });
    // The TD proxy seals a non-stream answer of its server as an envelope, even for a stream.
    expect(dueAnswer(SEALED_RESPONSE_MEDIA_TYPE, sealedStream).kind).toBe("json");
    expect(dueAnswer("application/json", sealedStream).kind).toBe("refused");
  });

  it("reads the media type without its parameters", () => {
    expect(mediaTypeOf(" Text/Event-Stream ; charset=utf-8")).toBe("text/event-stream");
    expect(mediaTypeOf("")).toBeUndefined();
    expect(mediaTypeOf(undefined)).toBeUndefined();
  });
});

describe("isJsonBody", () => {
  it("takes objects and arrays, with white space around them", () => {
    expect(isJsonBody(b('{"object":"chat.completion"}'))).toBe(true);
    expect(isJsonBody(b(" \r\n\t[1, 2]\n"))).toBe(true);
    expect(isJsonBody(b("{}"))).toBe(true);
  });

  it("refuses HTML, text, empty and cut bodies, and invalid JSON that is small enough to parse", () => {
    for (const body of [
      "<html><body>502</body></html>",
      "Internal Server Error",
      "",
      "   ",
      '{"id":"c1","choices":[',
      "{not json}",
      '{"a":1}}',
      "[1,2}",
      "{",
      '"a string"',
      "42",
    ]) {
      expect(isJsonBody(b(body)), body).toBe(false);
    }
  });

  it("judges a body larger than PARSED_JSON_MAX_BYTES by its framing only", () => {
    const large = `{"pad":"${"a".repeat(PARSED_JSON_MAX_BYTES)}"}`;
    expect(isJsonBody(b(large))).toBe(true);
    expect(isJsonBody(b(`{not json ${"a".repeat(PARSED_JSON_MAX_BYTES)}}`))).toBe(true);
    expect(isJsonBody(b(`<html>${"a".repeat(PARSED_JSON_MAX_BYTES)}</html>`))).toBe(false);
  });

  it("reads a subarray as the bytes it views", () => {
    const whole = b('xx{"a":1}yy');
    expect(isJsonBody(whole.subarray(2, 9))).toBe(true);
  });
});

describe("JsonFramingTracker", () => {
  it("agrees with hasJsonFraming however the body is split", () => {
    const bodies = fc.oneof(
      fc.json(),
      fc.string(),
      fc.constantFrom("  {}  ", "[ ]\n", '{"a":[1]}\r\n', " \n ", "<p>x</p>"),
    );
    fc.assert(
      fc.property(bodies, fc.array(fc.nat(), { maxLength: 4 }), (text, cuts) => {
        const body = b(text);
        const at = [...new Set(cuts.map((c) => c % (body.length + 1)))].sort((x, y) => x - y);
        const tracker = new JsonFramingTracker();
        let from = 0;
        for (const to of [...at, body.length]) {
          tracker.push(body.subarray(from, to));
          from = to;
        }
        expect(tracker.closesWell()).toBe(hasJsonFraming(body));
      }),
    );
  });

  it("knows from the first bytes whether a body opens as JSON", () => {
    const tracker = new JsonFramingTracker();
    tracker.push(b("  "));
    expect(tracker.opensWell()).toBe(false);
    tracker.push(b("\n{"));
    expect(tracker.opensWell()).toBe(true);
    expect(tracker.closesWell()).toBe(false);
    tracker.push(b('"a":1}\n'));
    expect(tracker.closesWell()).toBe(true);
  });
});
