// callNode against real HTTP servers through a real undici pool: how large, capped and
// deadline-cut answers reach the reply writer.
import { createServer } from "node:http";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ReplyWriter } from "@zml/bus";
import { Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { createCollectingWriter } from "../src/batch/collecting-writer.ts";
import { callNode, classify } from "../src/node-call.ts";

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

/** A collecting writer that also records the order of the frames written. */
function frames() {
  const kinds: string[] = [];
  const inner = createCollectingWriter();
  const writer: ReplyWriter = {
    full: (...a) => (kinds.push("full"), inner.full(...a)),
    head: (...a) => (kinds.push("head"), inner.head(...a)),
    chunk: (data) => (kinds.push("chunk"), inner.chunk(data)),
    end: () => (kinds.push("end"), inner.end()),
    error: (...a) => (kinds.push("error"), inner.error(...a)),
  };
  return { kinds, collected: () => inner.reply(), writer };
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
    const pool = await node((_req, res) => res.end(body));
    const f = frames();
    expect(await call(pool, f.writer)).toMatchObject({ kind: "relayed", status: 200 });
    expect(f.kinds[0]).toBe("head");
    expect(f.kinds.at(-1)).toBe("end");
    expect(Buffer.concat(f.collected().chunks).equals(body)).toBe(true);
  });

  it("cuts an answer past maxAnswerBytes with response_too_large", async () => {
    const pool = await node((_req, res) => {
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
