import { connect, createServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { pollUntil } from "@zml/harness";
import { afterEach, describe, expect, it } from "vitest";
import { Http1Pool } from "../src/node/http1/http1-pool.ts";
import { MalformedAnswerError, ResponseParser } from "../src/node/http1/response-parser.ts";
import type { ResponseHead } from "../src/node/http1/response-parser.ts";
import { requestNode } from "../src/node/node-answer.ts";

/** Feeds `bytes` to a parser in pieces of `step` bytes; what it read. */
function parse(bytes: string, step = bytes.length) {
  const seen = { heads: [] as ResponseHead[], body: "", ends: 0, leftOver: 0 };
  const parser = new ResponseParser({
    onHead: (h) => seen.heads.push(h),
    onBody: (data, start, end) => (seen.body += data.toString("latin1", start, end)),
    onEnd: () => seen.ends++,
  });
  const data = Buffer.from(bytes, "latin1");
  // Each piece is parsed in a buffer that is then overwritten, as the pool's shared read
  // buffer is, with stale line ends past its end: nothing may be kept or read from there.
  const reused = Buffer.alloc(data.length + 8, "\r\n");
  for (let at = 0; at < data.length; at += step) {
    const piece = data.subarray(at, at + step);
    piece.copy(reused);
    seen.leftOver += parser.execute(reused, piece.length, () => true);
    reused.fill("\r\n");
  }
  return Object.assign(seen, { finish: () => parser.finish() });
}

const SSE =
  "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
  "9\r\ndata: 1\n\n\r\n" +
  "9;ext=1\r\ndata: 2\n\n\r\n" +
  "e\r\ndata: [DONE]\n\n\r\n" +
  "0\r\nx-trailer: t\r\n\r\n";

describe("ResponseParser", () => {
  it("reads a chunked answer the same whichever way its bytes are split", () => {
    for (const step of [1, 2, 3, 7, 64, SSE.length]) {
      const seen = parse(SSE, step);
      expect(seen.heads).toHaveLength(1);
      expect(seen.heads[0]).toMatchObject({
        statusCode: 200,
        headers: { "content-type": "text/event-stream" },
        keepAlive: true,
      });
      expect(seen.body).toBe("data: 1\n\ndata: 2\n\ndata: [DONE]\n\n");
      expect(seen.ends).toBe(1);
      expect(seen.leftOver).toBe(0);
    }
  });

  it("frames bodies by length, by status and by the connection's end; skips 1xx heads", () => {
    const long = parse(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
      4,
    );
    expect(long.heads.map((h) => h.statusCode)).toEqual([200]);
    expect([long.body, long.ends]).toEqual(["hello", 1]);

    const none = parse("HTTP/1.1 204 No Content\r\n\r\n");
    expect([none.body, none.ends]).toEqual(["", 1]);

    const untilClose = parse("HTTP/1.1 200 OK\r\n\r\npart one, part two");
    expect([untilClose.body, untilClose.ends]).toEqual(["part one, part two", 0]);
    expect(untilClose.heads[0]!.keepAlive).toBe(true);
    expect(untilClose.finish()).toBe(true);
    expect(untilClose.ends).toBe(1);

    // A length-framed answer cut short is not ended by the connection's end.
    const cut = parse("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhalf");
    expect(cut.finish()).toBe(false);
    expect(cut.ends).toBe(0);
  });

  it("says whether the connection may be reused, and for how long the node keeps it", () => {
    expect(
      parse("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").heads[0]!
        .keepAlive,
    ).toBe(false);
    expect(parse("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").heads[0]!.keepAlive).toBe(false);
    const hinted = parse(
      "HTTP/1.1 200 OK\r\nkeep-alive: timeout=5, max=100\r\ncontent-length: 0\r\n\r\n",
    );
    expect(hinted.heads[0]).toMatchObject({ keepAlive: true, keepAliveHintMs: 5_000 });
  });

  it("keeps repeated headers, lower-cased, and reports bytes after the answer's end", () => {
    const seen = parse("HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\ncontent-length: 2\r\n\r\nokEXTRA");
    expect(seen.heads[0]!.headers["x-a"]).toEqual(["1", "2"]);
    expect([seen.body, seen.leftOver]).toEqual(["ok", 5]);
  });

  it.each([
    ["a bare LF line end", "HTTP/1.1 200 OK\nx: 1\r\n\r\n"],
    ["a folded header line", "HTTP/1.1 200 OK\r\nx: 1\r\n continued\r\n\r\n"],
    ["a header name with a space", "HTTP/1.1 200 OK\r\nx y: 1\r\n\r\n"],
    ["a control character in a value", "HTTP/1.1 200 OK\r\nx: a\x01b\r\n\r\n"],
    [
      "Content-Length beside Transfer-Encoding",
      "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
    ],
    [
      "two Content-Lengths that differ",
      "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
    ],
    ["a Content-Length that is not a number", "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"],
    ["a bad status line", "HTTP/2 200 OK\r\n\r\n"],
    ["a protocol switch", "HTTP/1.1 101 Switching Protocols\r\n\r\n"],
    ["a chunk size that is not hex", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"],
    [
      "a chunk size of 13 digits",
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1000000000000\r\n",
    ],
    ["a chunk without its CRLF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokX"],
    ["a head over 16 KiB", `HTTP/1.1 200 OK\r\nx: ${"a".repeat(17 * 1024)}`],
    [
      "a chunk-size line over 4 KiB",
      `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;${"e".repeat(5000)}`,
    ],
  ])("refuses %s", (_what, bytes) => {
    for (const step of [1, bytes.length]) {
      expect(() => parse(bytes, step)).toThrow(MalformedAnswerError);
    }
  });
});

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

/** A node that answers each request with `answer(n)` (n counts requests), raw bytes. */
async function rawNode(answer: (n: number, socket: Socket) => string | null) {
  const sockets = new Set<Socket>();
  const requests: string[] = [];
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let pending = "";
    socket.on("data", (d) => {
      pending += d.toString("latin1");
      for (;;) {
        const end = pending.indexOf("\r\n\r\n");
        if (end === -1) return;
        const length = Number(/content-length: (\d+)/i.exec(pending.slice(0, end))?.[1] ?? 0);
        if (pending.length < end + 4 + length) return;
        requests.push(pending.slice(0, end + 4 + length));
        pending = pending.slice(end + 4 + length);
        const out = answer(requests.length, socket);
        if (out !== null) socket.write(out);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  cleanup.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { origin, requests, connections: () => connections, open: () => sockets.size };
}

function poolTo(
  origin: string,
  options: { connections?: number; keepAliveTimeoutMs?: number } = {},
) {
  const pool = new Http1Pool({
    origin,
    connections: options.connections ?? 4,
    connectTimeoutMs: 2_000,
    keepAliveTimeoutMs: options.keepAliveTimeoutMs ?? 30_000,
    dial: (o) => connect(o),
  });
  cleanup.push(() => pool.destroy());
  return pool;
}

const call = (
  pool: Http1Pool,
  extra: { headers?: Record<string, string>; bodyTimeout?: number; signal?: AbortSignal } = {},
) =>
  requestNode(pool, {
    path: "/v1/chat/completions",
    method: "POST",
    headers: extra.headers ?? { "content-type": "application/json" },
    body: Buffer.from('{"model":"m"}'),
    signal: extra.signal ?? new AbortController().signal,
    headersTimeout: 0,
    bodyTimeout: extra.bodyTimeout ?? 10_000,
  });

const OK = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";

describe("Http1Pool", () => {
  it("sends one well-framed request and reuses the connection for the next call", async () => {
    const node = await rawNode(() => OK);
    const pool = poolTo(node.origin);
    for (let i = 0; i < 3; i++) {
      const answer = await call(pool);
      expect(Buffer.from(await answer.body.bytes()).toString()).toBe("{}");
    }
    expect(node.connections()).toBe(1);
    expect(node.requests[0]).toMatch(
      /^POST \/v1\/chat\/completions HTTP\/1\.1\r\nhost: 127\.0\.0\.1:\d+\r\ncontent-type: application\/json\r\ncontent-length: 13\r\n\r\n\{"model":"m"\}$/,
    );
  });

  it("queues calls beyond its connections and serves them in order", async () => {
    const node = await rawNode((n) => `HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n${n}`);
    const pool = poolTo(node.origin, { connections: 1 });
    const answers = await Promise.all([call(pool), call(pool), call(pool)]);
    const bodies = await Promise.all(
      answers.map(async (a) => Buffer.from(await a.body.bytes()).toString()),
    );
    expect(bodies).toEqual(["1", "2", "3"]);
    expect(node.connections()).toBe(1);
  });

  it("fails a malformed answer with its code and drops the connection; the next call gets a new one", async () => {
    const node = await rawNode((n) => (n === 1 ? "HTTP/1.1 200 OK\r\nbad header\r\n\r\n" : OK));
    const pool = poolTo(node.origin);
    await expect(call(pool)).rejects.toMatchObject({ code: "ZML_NODE_MALFORMED_ANSWER" });
    await (await call(pool)).body.dump();
    expect(node.connections()).toBe(2);
  });

  it("does not reuse a connection after bytes nobody asked for, or past the node's keep-alive hint", async () => {
    const extra = await rawNode(() => `${OK}HTTP/1.1 200 OK\r\n`);
    const pool = poolTo(extra.origin);
    await (await call(pool)).body.dump();
    await (await call(pool)).body.dump();
    expect(extra.connections()).toBe(2);

    const hinted = await rawNode(
      () => "HTTP/1.1 200 OK\r\nkeep-alive: timeout=1\r\ncontent-length: 0\r\n\r\n",
    );
    const short = poolTo(hinted.origin);
    await (await call(short)).body.dump();
    await (await call(short)).body.dump();
    expect(hinted.connections()).toBe(2);
  });

  it("forgets an idle connection the node closed", async () => {
    const node = await rawNode((_n, socket) => {
      setTimeout(() => socket.end(), 20);
      return OK;
    });
    const pool = poolTo(node.origin);
    await (await call(pool)).body.dump();
    await pollUntil(() => node.open() === 0);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await (await call(pool)).body.dump();
    expect(node.connections()).toBe(2);
  });

  it("fails a stream whose node goes quiet with a timeout code", async () => {
    const node = await rawNode(
      () => "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n",
    );
    const pool = poolTo(node.origin);
    const answer = await call(pool, { bodyTimeout: 150 });
    const chunks: string[] = [];
    await expect(
      answer.body.each((c) => {
        chunks.push(c.toString());
        return true;
      }),
    ).rejects.toMatchObject({ code: "ZML_NODE_BODY_TIMEOUT" });
    expect(chunks).toEqual(["data: 1\n\n"]);
  });

  it("refuses a header that would smuggle a line, and sends nothing", async () => {
    const node = await rawNode(() => OK);
    const pool = poolTo(node.origin);
    await expect(call(pool, { headers: { "x-evil": "a\r\nx-injected: 1" } })).rejects.toMatchObject(
      { code: "ZML_NODE_BAD_REQUEST" },
    );
    await expect(call(pool, { headers: { "content-length": "1" } })).rejects.toMatchObject({
      code: "ZML_NODE_BAD_REQUEST",
    });
    expect(node.requests).toEqual([]);
  });

  it("fails a call to a node that is not listening with the socket's code", async () => {
    const node = await rawNode(() => OK);
    await cleanup.pop()!(); // the port is closed again
    const pool = poolTo(node.origin);
    await expect(call(pool)).rejects.toMatchObject({ code: "ECONNREFUSED" });
  });

  it("closes once what was dispatched is served, and refuses calls after", async () => {
    let held: Socket | undefined;
    const node = await rawNode((_n, socket) => {
      held = socket; // answered below, after the pool is told to close
      return null;
    });
    const pool = poolTo(node.origin);
    const pending = call(pool);
    await pollUntil(() => held !== undefined);
    let closed = false;
    const closing = pool.close().then(() => (closed = true));
    await expect(call(pool)).rejects.toMatchObject({ code: "ZML_NODE_POOL_CLOSED" });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(closed).toBe(false);
    held!.write(OK);
    expect(Buffer.from(await (await pending).body.bytes()).toString()).toBe("{}");
    await closing;
    expect(closed).toBe(true);
    await pollUntil(() => node.open() === 0);
  });
});
