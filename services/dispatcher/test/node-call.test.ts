// callNode against real HTTP servers through a real undici pool: how large, capped and
// deadline-cut answers reach the reply writer.
import { createServer } from "node:http";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ReplyWriter } from "@zml/bus";
import { pollUntil, pourResponse } from "@zml/harness";
import { Pool } from "undici";
import type { Dispatcher } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { SEALED_RESPONSE_MEDIA_TYPE } from "@zml/contracts";
import { createCollectingWriter } from "../src/batch/collecting-writer.ts";
import { callNode, classify, refusalMessage } from "../src/node/node-call.ts";
import { attemptSignal } from "../src/route/attempt-signal.ts";

const MiB = 1024 * 1024;
const servers: Server[] = [];
const pools: Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.destroy()));
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
});

async function node(handler: Parameters<typeof createServer>[1]): Promise<Pool> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  pools.push(pool);
  return pool;
}

const token = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":"${t}"},"finish_reason":null}]}\n\n`;

/** A collecting writer that also records the order of the frames written. */
function frames() {
  const kinds: string[] = [];
  /** The node time each head frame carried. */
  const headNodeMs: (number | undefined)[] = [];
  const inner = createCollectingWriter();
  const writer: ReplyWriter = {
    full: (...a) => (kinds.push("full"), inner.full(...a)),
    head: (...a) => (kinds.push("head"), headNodeMs.push(a[3]?.nodeMs), inner.head(...a)),
    chunk: (data) => (kinds.push("chunk"), inner.chunk(data)),
    end: () => (kinds.push("end"), inner.end()),
    error: (...a) => (kinds.push("error"), inner.error(...a)),
  };
  return { kinds, headNodeMs, collected: () => inner.reply(), writer };
}

const call = (pool: Pool, writer: ReplyWriter, over = {}) =>
  callNode({
    pool,
    path: "/v1/chat/completions",
    body: Buffer.from("{}"),
    headers: { "content-type": "application/json" },
    stream: false,
    sealed: false,
    api: "chat",
    signal: new AbortController().signal,
    onFirstByte: () => {},
    bodyIdleTimeoutMs: 5_000,
    maxAnswerBytes: 16 * MiB,
    writer,
    routing: "node=a",
    startedAt: Date.now(),
    clock: Date.now,
    ...over,
  });

describe("callNode", () => {
  it("holds a small answer whole: one full frame", async () => {
    const pool = await node((_req, res) => res.end(JSON.stringify({ ok: true })));
    const f = frames();
    expect(await call(pool, f.writer)).toMatchObject({ kind: "relayed", status: 200 });
    expect(f.kinds).toEqual(["full"]);
  });

  it("relays a large answer in pieces as it arrives, byte for byte", async () => {
    const body = Buffer.alloc(5 * MiB, "x");
    body.write('{"big":"', 0);
    body.write('"}', body.length - 2);
    const pool = await node((_req, res) => res.end(body));
    const f = frames();
    expect(await call(pool, f.writer)).toMatchObject({ kind: "relayed", status: 200 });
    expect(f.kinds[0]).toBe("head");
    expect(f.kinds.at(-1)).toBe("end");
    expect(Buffer.concat(f.collected().chunks).equals(body)).toBe(true);
  });

  it("cuts an answer past maxAnswerBytes with response_too_large", async () => {
    const pool = await node((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"pad":"');
      const block = Buffer.alloc(MiB, "y");
      let sent = 0;
      const more = () => {
        while (sent < 64 && res.write(block)) sent++;
        if (sent < 64) res.once("drain", more);
        else res.end();
      };
      more();
    });
    const f = frames();
    const outcome = await call(pool, f.writer, { maxAnswerBytes: 4 * MiB });
    expect(outcome.kind).toBe("broken");
    expect(f.collected().error?.code).toBe("response_too_large");
    const relayed = f.collected().chunks.reduce((n, c) => n + c.byteLength, 0);
    expect(relayed).toBeLessThanOrEqual(4 * MiB);
  });

  it("ends a stream cut by the request deadline with upstream_timeout, not a crash", async () => {
    const pool = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"choices":[]}\n\n'); // then silence
    });
    const f = frames();
    const deadline = new AbortController();
    setTimeout(
      () => deadline.abort(new DOMException("request deadline passed", "TimeoutError")),
      200,
    );
    const outcome = await call(pool, f.writer, { stream: true, signal: deadline.signal });
    expect(outcome.kind).toBe("broken");
    expect(f.collected().error?.code).toBe("upstream_timeout");
  });
});

describe("callNode on a sealed stream", () => {
  const sealedStream = (events: string) =>
    node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(events);
    });

  it("is complete at the final chunk's event, and adds no [DONE] of its own", async () => {
    const pool = await sealedStream("data: AAAA\n\ndata: BBBB\n\nevent: final\ndata: CCCC\n\n");
    const f = frames();
    const outcome = await call(pool, f.writer, { stream: true, sealed: true });
    expect(outcome).toMatchObject({ kind: "relayed", status: 200 });
    const relayed = Buffer.concat(f.collected().chunks).toString();
    expect(relayed).toBe("data: AAAA\n\ndata: BBBB\n\nevent: final\ndata: CCCC\n\n");
    expect(f.kinds.at(-1)).toBe("end");
  });

  it("ends with an error when the final chunk never came, whatever the events say", async () => {
    // A finish_reason in clear means nothing in a sealed stream: only the final chunk counts.
    const pool = await sealedStream('data: {"finish_reason":"stop"}\n\ndata: [DONE]\n\n');
    const f = frames();
    const outcome = await call(pool, f.writer, { stream: true, sealed: true });
    expect(outcome.kind).toBe("broken");
    expect(f.collected().error?.code).toBe("stream_interrupted");
  });

  it("takes a 410 for a session whose key the TD no longer holds, before relaying it", async () => {
    const pool = await node((_req, res) => res.writeHead(410).end("{}"));
    const f = frames();
    const outcome = await call(pool, f.writer, { sealed: true });
    expect(outcome).toMatchObject({ kind: "retryable", status: 410 });
    expect(f.kinds).toEqual([]);
  });
});

describe("callNode judges an answer before relaying it", () => {
  const answering = (status: number, headers: Record<string, string>, body: string) =>
    node((_req, res) => res.writeHead(status, headers).end(body));

  it("takes a node's own 401/403 as a refused credential: retryable, its message for the log", async () => {
    const openAi = JSON.stringify({
      error: {
        message: "Incorrect API key provided",
        type: "invalid_request_error",
        code: "invalid_api_key",
      },
    });
    for (const [status, body, said] of [
      [401, openAi, "Incorrect API key provided"],
      [
        403,
        '{"error":"Forbidden: model not enabled","error_type":"auth"}',
        "Forbidden: model not enabled",
      ],
      [
        401,
        "<html>\n<h1>401   Authorization Required</h1></html>",
        "<html> <h1>401 Authorization Required</h1></html>",
      ],
    ] as const) {
      const pool = await answering(status, { "content-type": "application/json" }, body);
      const f = frames();
      const outcome = await call(pool, f.writer);
      expect(outcome).toEqual({
        kind: "retryable",
        status,
        outcome: "auth_failed",
        error: `refused the gateway's credential (${status})`,
        retryAfterS: null,
        nodeMessage: said,
      });
      expect(f.kinds).toEqual([]);
    }
  });

  it("reads nothing of a sealed call's 401: its body is sealed", async () => {
    const pool = await answering(401, { "content-type": SEALED_RESPONSE_MEDIA_TYPE }, "{}");
    const outcome = await call(pool, frames().writer, { sealed: true });
    expect(outcome).toMatchObject({ kind: "retryable", outcome: "auth_failed" });
    expect(outcome).not.toHaveProperty("nodeMessage");
  });

  it("relays other 4xx as they came, whatever their body", async () => {
    for (const status of [400, 402, 404, 409, 422, 429]) {
      const pool = await answering(status, { "content-type": "text/plain" }, "nope");
      const f = frames();
      expect(await call(pool, f.writer)).toMatchObject({ kind: "relayed", status });
      expect(f.collected()).toMatchObject({ status, contentType: "text/plain" });
    }
  });

  it("refuses a 200 that is not JSON where JSON is due, before relaying anything", async () => {
    for (const [type, body, error] of [
      ["text/html", "<html>hi</html>", "answered text/html where application/json is due"],
      ["application/json", "{not json", "answered a body that is not JSON"],
      ["application/json", "", "answered a body that is not JSON"],
      [
        "text/event-stream",
        "data: {}\n\n",
        "answered text/event-stream where application/json is due",
      ],
    ] as const) {
      const pool = await answering(200, { "content-type": type }, body);
      const f = frames();
      const outcome = await call(pool, f.writer);
      expect(outcome).toEqual({
        kind: "retryable",
        status: 200,
        outcome: "bad_response",
        error,
        retryAfterS: null,
      });
      expect(f.kinds).toEqual([]);
    }
  });

  it("takes JSON without a content type, relayed as application/json", async () => {
    const pool = await node((_req, res) => {
      res.removeHeader("content-type");
      res.end('{"object":"chat.completion"}');
    });
    const f = frames();
    expect(await call(pool, f.writer)).toMatchObject({ kind: "relayed", status: 200 });
    expect(f.collected().contentType).toBe("application/json");
  });

  it("refuses a large body that does not open as JSON, and cuts one that does not end as JSON", async () => {
    const html = await node((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(`<html>${"x".repeat(2 * MiB)}</html>`);
    });
    const refused = frames();
    expect(await call(html, refused.writer)).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
    });
    expect(refused.kinds).toEqual([]);
    const cut = await node((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(`{"pad":"${"x".repeat(2 * MiB)}`);
    });
    const f = frames();
    expect(await call(cut, f.writer)).toMatchObject({ kind: "broken", status: 200 });
    expect(f.kinds[0]).toBe("head");
    expect(f.collected().error?.code).toBe("bad_upstream_response");
  });

  it("refuses a non-SSE answer where SSE is due", async () => {
    const pool = await answering(200, { "content-type": "application/json" }, '{"choices":[]}');
    const f = frames();
    const outcome = await call(pool, f.writer, { stream: true });
    expect(outcome).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
      error: "answered application/json where SSE is due",
    });
    expect(f.kinds).toEqual([]);
  });

  it("refuses an event stream whose first lines are no SSE", async () => {
    const pool = await answering(200, { "content-type": "text/event-stream" }, "<html>\n\n</html>");
    const f = frames();
    const outcome = await call(pool, f.writer, { stream: true });
    expect(outcome).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
      error: "answered text/event-stream that is not SSE",
    });
    expect(f.kinds).toEqual([]);
  });

  it("relays a sealed envelope as it came, and refuses a sealed call's answer in clear", async () => {
    const envelope = '{"zml_sealed":2,"response_nonce":"AAAA","chunks":["BBBB"]}';
    const pool = await answering(200, { "content-type": SEALED_RESPONSE_MEDIA_TYPE }, envelope);
    const f = frames();
    expect(await call(pool, f.writer, { sealed: true })).toMatchObject({ kind: "relayed" });
    expect(f.collected()).toMatchObject({ contentType: SEALED_RESPONSE_MEDIA_TYPE });
    expect(Buffer.concat(f.collected().chunks).toString()).toBe(envelope);
    const plain = await answering(200, { "content-type": "application/json" }, "{}");
    expect(await call(plain, frames().writer, { sealed: true })).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
    });
  });

  it("reads a refusal's message from OpenAI's, TGI's or a plain body, on one bounded line", () => {
    expect(refusalMessage(Buffer.from('{"message":"no"}'))).toBe("no");
    expect(refusalMessage(Buffer.from('{"detail":"x"}'))).toBe('{"detail":"x"}');
    expect(refusalMessage(Buffer.from("  "))).toBeUndefined();
    expect(refusalMessage(Buffer.from("a".repeat(1000)))).toHaveLength(200);
  });
});

describe("callNode holds a stream's head until its first event", () => {
  /**
   * A node that sends its SSE headers and `before` at once, and `rest` when released; its pool
   * says when callNode has the headers in hand.
   */
  async function lateNode(before: string, rest: string) {
    let release: () => void = () => undefined;
    let headersReceived = false;
    const real = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(before);
      release = () => res.end(rest);
    });
    // The node's pool, noting when the answer's headers have reached the dispatcher.
    const pool = {
      dispatch: (options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) =>
        real.dispatch(options, {
          onRequestStart: (c, context: unknown) => handler.onRequestStart?.(c, context),
          onResponseStart: (c, status, headers, message) => {
            headersReceived = true;
            handler.onResponseStart?.(c, status, headers, message);
          },
          onResponseData: (c, chunk) => handler.onResponseData?.(c, chunk),
          onResponseEnd: (c, trailers) => handler.onResponseEnd?.(c, trailers),
          onResponseError: (c, err) => handler.onResponseError?.(c, err),
        }),
    } as unknown as Pool;
    return { pool, release: () => release(), headersReceived: () => headersReceived };
  }

  it("sends the head with the first event, comments before it included, byte for byte", async () => {
    const events = token("Hel") + token("lo") + 'data: {"choices":[{"finish_reason":"stop"}]}\n\n';
    const late = await lateNode(": keep-alive\n\n", events);
    let now = 0;
    let firstByteAt: number | undefined;
    const f = frames();
    const pending = call(late.pool, f.writer, {
      stream: true,
      startedAt: 0,
      clock: () => now,
      onFirstByte: () => (firstByteAt = now),
    });
    await pollUntil(late.headersReceived);
    expect(f.kinds).toEqual([]); // the headers alone are no answer
    now = 1_000; // the time the first token comes
    late.release();
    expect(await pending).toMatchObject({ kind: "relayed", status: 200, ttftMs: 1_000 });
    expect(firstByteAt).toBe(1_000);
    expect(f.kinds[0]).toBe("head");
    expect(f.headNodeMs).toEqual([1_000]);
    expect(Buffer.concat(f.collected().chunks).toString()).toBe(
      ": keep-alive\n\n" + events + "data: [DONE]\n\n",
    );
  });

  it("fails over, having relayed nothing, when no event comes within the first-byte limit", async () => {
    const late = await lateNode(": keep-alive\n\n", token("late"));
    const abort = attemptSignal(new AbortController().signal, {
      firstByteMs: 150,
      deadline: Date.now() + 60_000,
      clock: Date.now,
    });
    const f = frames();
    try {
      const outcome = await call(late.pool, f.writer, {
        stream: true,
        signal: abort.signal,
        onFirstByte: abort.firstByteArrived,
      });
      expect(outcome).toMatchObject({ kind: "retryable", status: 200, outcome: "timeout" });
      expect(f.kinds).toEqual([]);
    } finally {
      abort.dispose();
      late.release();
    }
  });

  it("fails over when a stream ends, or stops for good, before its first event", async () => {
    const empty = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(": nothing to say\n\n");
    });
    const f = frames();
    expect(await call(empty, f.writer, { stream: true })).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
      error: "stream ended before its first event",
    });
    const broken = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(": a moment\n\n", () => res.socket?.destroy());
    });
    expect(await call(broken, f.writer, { stream: true })).toMatchObject({
      kind: "retryable",
      outcome: "network_error",
    });
    expect(f.kinds).toEqual([]);
  });

  it("refuses keep-alives without end: more than an event's worth of comments", async () => {
    const chatty = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      pourResponse(res, Buffer.from(`: ${"z".repeat(1000)}\n\n`), 4 * MiB);
    });
    const f = frames();
    expect(await call(chatty, f.writer, { stream: true })).toMatchObject({
      kind: "retryable",
      outcome: "bad_response",
    });
    expect(f.kinds).toEqual([]);
  });
});

describe("classify", () => {
  it("reads a DOMException's numeric code as no code", () => {
    const e = new DOMException("request deadline passed", "TimeoutError");
    expect(classify(e)).toEqual({ outcome: "timeout", error: "TimeoutError" });
    expect(classify({ code: "UND_ERR_HEADERS_TIMEOUT" }).outcome).toBe("timeout");
    expect(classify({ code: "ECONNRESET" })).toEqual({
      outcome: "network_error",
      error: "ECONNRESET",
    });
    expect(classify(undefined)).toEqual({ outcome: "network_error", error: "error" });
  });
});
