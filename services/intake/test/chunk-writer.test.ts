import { once } from "node:events";
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { connect } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ChunkWriter, frameChunkInto } from "../src/relay/chunk-writer.ts";

/** Bytes `0..n-1` of a pattern that differs per `seed`, so a chunk overwritten by another shows. */
const pattern = (n: number, seed: number) =>
  Uint8Array.from({ length: n }, (_, i) => Math.imul(i + seed * 7919, 0x9e3779b1) >>> 24);

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A real HTTP server whose single route runs `answer` with a fresh writer per test. */
async function serve(answer: (res: ServerResponse, req: IncomingMessage) => unknown) {
  const server = createServer((req, res) => void answer(res, req));
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as AddressInfo).port;
}

/** Sends `request` on a raw socket and returns every byte the server sent until it closed. */
async function rawExchange(
  port: number,
  request: string,
  readDelayMs = 0,
): Promise<{ head: string; body: Buffer }> {
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  if (readDelayMs > 0) socket.pause();
  socket.write(request);
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  if (readDelayMs > 0) setTimeout(() => socket.resume(), readDelayMs);
  await once(socket, "close");
  const all = Buffer.concat(chunks);
  const split = all.indexOf("\r\n\r\n");
  return { head: all.subarray(0, split).toString("latin1"), body: all.subarray(split + 4) };
}

/** Reads a chunked body strictly (RFC 9112 §7.1): the chunks' data, and the bytes after it. */
function dechunk(body: Buffer): { data: Buffer[]; rest: Buffer } {
  const data: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = body.indexOf("\r\n", at);
    if (lineEnd === -1) throw new Error(`no chunk size line at ${at}`);
    const sizeText = body.subarray(at, lineEnd).toString("latin1");
    if (!/^[0-9a-f]+$/.test(sizeText)) throw new Error(`bad chunk size "${sizeText}"`);
    const size = parseInt(sizeText, 16);
    at = lineEnd + 2;
    if (size === 0) {
      if (body.subarray(at, at + 2).toString("latin1") !== "\r\n") throw new Error("no final CRLF");
      return { data, rest: body.subarray(at + 2) };
    }
    data.push(body.subarray(at, at + size));
    at += size;
    if (body.subarray(at, at + 2).toString("latin1") !== "\r\n") {
      throw new Error(`chunk of ${size} bytes not followed by CRLF`);
    }
    at += 2;
  }
}

const GET = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

describe("frameChunkInto", () => {
  it("frames a chunk as its size in lowercase hex, CRLF, the bytes and CRLF", () => {
    for (const size of [1, 15, 16, 255, 256, 4095, 4096, 65_535, 65_536]) {
      const data = pattern(size, size);
      const hex = size.toString(16);
      const out = new Uint8Array(hex.length + size + 4);
      frameChunkInto(out, data);
      const framed = Buffer.from(out);
      expect(framed.subarray(0, hex.length + 2).toString("latin1")).toBe(`${hex}\r\n`);
      expect(framed.subarray(hex.length + 2, hex.length + 2 + size).equals(data)).toBe(true);
      expect(framed.subarray(-2).toString("latin1")).toBe("\r\n");
    }
  });
});

describe("ChunkWriter on a real HTTP/1.1 response", () => {
  it("writes every chunk framed and in order, and end() still closes the body", async () => {
    const sizes = [5, 1, 16, 255, 256, 3000, 4096, 17, 70_000, 9];
    let direct = 0;
    const port = await serve(async (res) => {
      const writer = new ChunkWriter();
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const [i, size] of sizes.entries()) {
        // A chunk a turn, as a stream's tokens come: from the second on, the socket's queue
        // is empty and the chunk goes to it directly.
        if (i > 0 && res.writableLength === 0) direct++;
        writer.write(res, pattern(size, i), i > 0);
        await new Promise((r) => setImmediate(r));
      }
      res.end();
    });
    const { head, body } = await rawExchange(port, GET);
    expect(head).toMatch(/transfer-encoding: chunked/i);
    const { data, rest } = dechunk(body);
    expect(rest.length).toBe(0);
    expect(direct).toBeGreaterThan(sizes.length / 2);
    expect(Buffer.concat(data).equals(Buffer.concat(sizes.map((s, i) => pattern(s, i))))).toBe(
      true,
    );
  });

  it("never reuses a buffer a slow client's queued write still holds", async () => {
    // A slow client's socket fills, so a write to it queues in Node with its bytes; the next
    // write, to another client that reads, must not take those bytes' buffer. Chunks of 40 KiB
    // whose bytes differ per chunk show any overwrite.
    const size = 40 * 1024;
    const writer = new ChunkWriter(64 * 1024);
    const waiting: ServerResponse[] = [];
    let slowChunks = 0;
    const port = await serve((res, req) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      waiting[req.url === "/slow" ? 0 : 1] = res;
      const [slow, fast] = waiting;
      if (!slow || !fast) return;
      // The first chunk of each goes through the response, with its head; Node corks the
      // socket until the tick ends.
      writer.write(slow, pattern(size, slowChunks++), false);
      writer.write(fast, pattern(size, 1000), false);
      setImmediate(() => {
        // Until a write to the slow client is queued: at most 64 MiB, beyond loopback buffers.
        while (slow.writableLength === 0 && slowChunks < 1600) {
          writer.write(slow, pattern(size, slowChunks), true);
          slowChunks++;
        }
        for (let i = 1; i < 4; i++) writer.write(fast, pattern(size, 1000 + i), true);
        slow.end();
        fast.end();
      });
    });
    const slowDone = rawExchange(port, GET.replace("GET /", "GET /slow"), 300);
    await new Promise((r) => setTimeout(r, 50));
    const fastDone = rawExchange(port, GET.replace("GET /", "GET /fast"));
    const [slowBody, fastBody] = await Promise.all([slowDone, fastDone]);
    expect(slowChunks).toBeLessThan(1600);
    const got = Buffer.concat(dechunk(slowBody.body).data);
    expect(got.length).toBe(slowChunks * size);
    for (let i = 0; i < slowChunks; i++) {
      expect(got.subarray(i * size, (i + 1) * size).equals(pattern(size, i)), `chunk ${i}`).toBe(
        true,
      );
    }
    const fastGot = Buffer.concat(dechunk(fastBody.body).data);
    expect(fastGot.equals(Buffer.concat([0, 1, 2, 3].map((i) => pattern(size, 1000 + i))))).toBe(
      true,
    );
  });

  it("writes through the response for a client without chunked encoding (HTTP/1.0)", async () => {
    const port = await serve((res) => {
      const writer = new ChunkWriter();
      res.writeHead(200, { "content-type": "text/plain" });
      writer.write(res, Buffer.from("first "), false);
      writer.write(res, Buffer.from("second"), true);
      res.end();
    });
    const { head, body } = await rawExchange(port, "GET / HTTP/1.0\r\nHost: x\r\n\r\n");
    expect(head).not.toMatch(/transfer-encoding/i);
    expect(body.toString("latin1")).toBe("first second");
  });

  it("answers pipelined requests in order, each body framed whole", async () => {
    let n = 0;
    const port = await serve((res) => {
      const me = n++;
      const writer = new ChunkWriter();
      res.writeHead(200, { "content-type": "text/plain" });
      // The second response waits for the first: its writes queue in the response itself.
      setTimeout(
        () => {
          for (let i = 0; i < 3; i++) writer.write(res, Buffer.from(`r${me}c${i};`), i > 0);
          res.end();
        },
        me === 0 ? 50 : 0,
      );
    });
    const keepAlive = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    const { body } = await rawExchange(port, keepAlive + GET);
    const first = dechunk(body);
    const second = dechunk(first.rest.subarray(first.rest.indexOf("\r\n\r\n") + 4));
    expect(Buffer.concat(first.data).toString()).toBe("r0c0;r0c1;r0c2;");
    expect(Buffer.concat(second.data).toString()).toBe("r1c0;r1c1;r1c2;");
  });
});
