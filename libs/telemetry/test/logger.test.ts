import { hostname } from "node:os";
import { context } from "@opentelemetry/api";
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  StackContextManager,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pino } from "pino";
import { createLogger, REDACT_PATHS, REDACTED } from "../src/index.ts";
import { skipsRedactingPrimitives } from "../src/logger.ts";
import { captureStream } from "./capture.ts";

const SECRET = "sk-planted-secret-3f9a";

describe("createLogger", () => {
  it("writes JSON lines with the service and level label", () => {
    const out = captureStream();
    const log = createLogger({ service: "intake", destination: out });
    log.info({ node: "h100-a" }, "dispatched");
    const [line] = out.lines();
    expect(line).toMatchObject({
      service: "intake",
      level: "info",
      node: "h100-a",
      msg: "dispatched",
    });
    expect(typeof line!.time).toBe("string");
  });

  it("honours the level", () => {
    const out = captureStream();
    const log = createLogger({ service: "intake", level: "warn", destination: out });
    log.info("hidden");
    log.warn("shown");
    expect(out.lines().map((l) => l.msg)).toEqual(["shown"]);
  });

  it("never writes credentials, prompts or bodies", () => {
    const out = captureStream();
    const log = createLogger({ service: "intake", destination: out });
    log.info(
      {
        req: {
          method: "POST",
          headers: { authorization: `Bearer ${SECRET}`, "x-api-key": SECRET },
        },
        headers: { authorization: SECRET },
        authorization: SECRET,
        apiKey: SECRET,
        account: { api_key: SECRET },
        body: `{"prompt":"${SECRET}"}`,
        request: { prompt: SECRET, messages: [{ role: "user", content: SECRET }] },
        messages: [{ role: "user", content: SECRET }],
        prompt: SECRET,
        reply: { content: SECRET, body: SECRET },
      },
      "request received",
    );
    log.child({ body: SECRET }).warn({ choices: [{ text: SECRET }] }, "child line");

    const text = out.text();
    expect(out.lines()).toHaveLength(2);
    expect(text).not.toContain(SECRET);
    expect(text).toContain(REDACTED);
    const [first] = out.lines();
    expect(first).toMatchObject({
      req: { method: "POST", headers: { authorization: REDACTED, "x-api-key": REDACTED } },
      body: REDACTED,
      request: { prompt: REDACTED, messages: REDACTED },
    });
  });

  it("writes every line as pino's own redaction does (values that are not objects skip it)", () => {
    const ours = captureStream();
    const theirs = captureStream();
    const log = createLogger({ service: "intake", destination: ours });
    // pino with the same settings and nothing of ours in between.
    const reference = pino(
      {
        base: { service: "intake", hostname: hostname(), pid: process.pid },
        timestamp: false,
        formatters: { level: (label: string) => ({ level: label }) },
        redact: { paths: [...REDACT_PATHS], censor: REDACTED },
      },
      theirs,
    );
    const write = (logger: typeof log) => {
      logger.info(
        {
          text: 'quotes " and \\ and \u2028 and ünïcödé',
          count: 3.25,
          notANumber: Number.NaN,
          infinite: Number.POSITIVE_INFINITY,
          flag: false,
          nothing: null,
          missing: undefined,
          big: 12n,
          fn: () => 1,
          sym: Symbol("s"),
          when: new Date(0),
          list: [1, "two", { role: "user" }],
          nested: { body: SECRET, headers: { authorization: SECRET, other: "kept" }, ok: 1 },
          headers: { "x-api-key": SECRET, accept: "json" },
          err: Object.assign(new Error("failed"), { body: SECRET, stack: "Error: failed" }),
          body: SECRET,
        },
        "message with %s",
        "an argument",
      );
      logger.child({ reqId: "req-1", depth: 2, extra: { prompt: SECRET } }).warn("child line");
      logger.error("no object");
    };
    write(log);
    write(reference);
    const withoutTime = (lines: Record<string, unknown>[]) =>
      lines.map(({ time: _time, ...rest }) => rest);
    expect(ours.lines()).toHaveLength(3);
    // The shortcut is in place, on the root and its children: a pino release that lays its
    // internals out differently fails here instead of silently losing it.
    expect(skipsRedactingPrimitives(log)).toBe(true);
    expect(skipsRedactingPrimitives(log.child({ reqId: "r" }))).toBe(true);
    expect(skipsRedactingPrimitives(reference)).toBe(false);
    expect(ours.text()).not.toContain(SECRET);
    expect(withoutTime(ours.lines())).toEqual(theirs.lines());
  });

  describe("inside a span", () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({
      spanProcessors: [new SimpleSpanProcessor({ exporter })],
    });
    beforeAll(() => {
      context.setGlobalContextManager(new StackContextManager().enable());
    });
    afterAll(async () => {
      context.disable();
      await provider.shutdown();
    });

    it("adds trace_id and span_id of the active span", () => {
      const out = captureStream();
      const log = createLogger({ service: "dispatcher", destination: out });
      provider.getTracer("test").startActiveSpan("decide", (span) => {
        log.info("deciding");
        span.end();
      });
      log.info("after");

      const [inside, after] = out.lines();
      const [finished] = exporter.getFinishedSpans();
      expect(finished).toBeDefined();
      expect(inside).toMatchObject({
        trace_id: finished!.spanContext().traceId,
        span_id: finished!.spanContext().spanId,
      });
      expect(inside!.trace_id).toMatch(/^[0-9a-f]{32}$/);
      expect(after).not.toHaveProperty("trace_id");
      expect(after).not.toHaveProperty("span_id");
    });
  });
});
