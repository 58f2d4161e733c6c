import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { connect } from "node:net";
import type { AddressInfo } from "node:net";
import { pollUntil } from "@zml/harness";
import { Client, Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { Http1Pool } from "../src/node/http1/http1-pool.ts";
import type { NodeDispatcher } from "../src/node/http1/http1-pool.ts";
import { requestNode } from "../src/node/node-answer.ts";

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

/** Both pools the dispatcher calls nodes with: undici's, and its own for plain HTTP/1.1. */
const POOLS = {
  undici: (origin: string, connections: number): NodeDispatcher =>
    connections === 1 ? new Client(origin) : new Pool(origin, { connections }),
  http1: (origin: string, connections: number): NodeDispatcher =>
    new Http1Pool({
      origin,
      connections,
      connectTimeoutMs: 5_000,
      keepAliveTimeoutMs: 30_000,
      dial: (o) => connect(o),
    }),
};

describe.each(Object.entries(POOLS))("requestNode through %s's pool", (_name, makePool) => {
  /** A real node on a random port, and a pool to it. */
  async function node(
    handler: (req: IncomingMessage, res: ServerResponse) => void,
    onConnection: () => void = () => undefined,
  ) {
    const server = createServer(handler);
    server.on("connection", onConnection);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const pool = makePool(origin, 10);
    const client = makePool(origin, 1);
    cleanup.push(async () => {
      await pool.destroy();
      await client.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    });
    return Object.assign(pool, { client });
  }

  const call = (pool: NodeDispatcher, signal = new AbortController().signal) =>
    requestNode(pool, {
      path: "/",
      method: "POST",
      headers: { "content-type": "application/json" },
      body: Buffer.from("{}"),
      signal,
      headersTimeout: 0,
      bodyTimeout: 10_000,
    });

  it("hands over status, headers and every chunk in order, also those that came before the reader", async () => {
    const pool = await node((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "x-node": "a" });
      res.write("data: 1\n\n");
      res.write("data: 2\n\n");
      setTimeout(() => res.end("data: 3\n\n"), 20);
    });
    const answer = await call(pool);
    expect(answer.statusCode).toBe(200);
    expect(answer.headers["x-node"]).toBe("a");
    await new Promise((resolve) => setTimeout(resolve, 10)); // the first chunks arrive unread
    const chunks: string[] = [];
    await answer.body.each((c) => {
      chunks.push(c.toString());
      return true;
    });
    expect(chunks.join("")).toBe("data: 1\n\ndata: 2\n\ndata: 3\n\n");
  });

  it("reads a whole body, and dumps one so its connection serves the next call", async () => {
    let connections = 0;
    const { client } = await node(
      (_req, res) => res.end(JSON.stringify({ ok: true })),
      () => connections++,
    );
    // One connection: a body left unread would hold the calls after it.
    const first = await call(client);
    expect(Buffer.from(await first.body.bytes()).toString()).toBe('{"ok":true}');
    await (await call(client)).body.dump();
    await (await call(client)).body.dump();
    expect(connections).toBe(1);
  });

  it("drops the body and its connection when the reader stops", async () => {
    let closed = false;
    const pool = await node((req, res) => {
      req.socket.on("close", () => (closed = true));
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n");
      // Never ends: only the dispatcher's drop can end this call.
    });
    const answer = await call(pool);
    let seen = 0;
    await answer.body.each(() => ++seen < 1);
    expect(seen).toBe(1);
    await pollUntil(() => closed);
  });

  it("rejects a body that breaks mid-answer", async () => {
    const pool = await node((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n");
      setTimeout(() => req.socket.destroy(), 20);
    });
    const answer = await call(pool);
    const chunks: string[] = [];
    await expect(
      answer.body.each((c) => {
        chunks.push(c.toString());
        return true;
      }),
    ).rejects.toMatchObject({ code: expect.stringMatching(/^(UND_ERR|ZML_NODE_CLOSED)/) });
    expect(chunks).toEqual(["data: 1\n\n"]);
  });

  it("rejects with the signal's reason mid-body, and at once while the node has not answered", async () => {
    const pool = await node((req, res) => {
      if (req.headers["x-wait"] === undefined) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: 1\n\n");
      }
      // Otherwise: no answer at all.
    });
    const mid = new AbortController();
    const answer = await call(pool, mid.signal);
    const reading = answer.body.each(() => true);
    mid.abort(new DOMException("first byte too late", "TimeoutError"));
    await expect(reading).rejects.toMatchObject({ name: "TimeoutError" });

    const early = new AbortController();
    const pending = requestNode(pool, {
      path: "/",
      method: "POST",
      headers: { "x-wait": "1" },
      body: null,
      signal: early.signal,
      headersTimeout: 0,
      bodyTimeout: 10_000,
    });
    setTimeout(() => early.abort(new DOMException("deadline", "TimeoutError")), 30);
    const startedAt = Date.now();
    await expect(pending).rejects.toMatchObject({ name: "TimeoutError" });
    expect(Date.now() - startedAt).toBeLessThan(5_000);
  });

  it("refuses to start a call whose signal is already aborted", async () => {
    let requests = 0;
    const pool = await node((_req, res) => {
      requests++;
      res.end();
    });
    const aborted = AbortSignal.abort(new DOMException("gone", "AbortError"));
    await expect(call(pool, aborted)).rejects.toMatchObject({ name: "AbortError" });
    expect(requests).toBe(0);
  });
});
