import { connect } from "node:net";
import type { AddressInfo } from "node:net";
import { createServer } from "node:http";
import type { ServerResponse } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { encodeChunk, writeBodyChunk } from "../src/chunked-write.ts";

describe("encodeChunk", () => {
  it("frames data as one chunk: size in hex, CRLF, data, CRLF", () => {
    expect(encodeChunk(Buffer.from("data: x\n\n")).toString("latin1")).toBe("9\r\ndata: x\n\n\r\n");
    const big = Buffer.alloc(300, 0x61);
    expect(encodeChunk(big).toString("latin1")).toBe(`12c\r\n${"a".repeat(300)}\r\n`);
  });

  it("refuses empty data, which would end the body", () => {
    expect(() => encodeChunk(new Uint8Array(0))).toThrow(RangeError);
  });
});

/** Sends raw HTTP/1.1 on one socket and returns every byte the server sent, until it closes. */
function rawExchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(request));
    let got = "";
    socket.on("data", (d: Buffer) => (got += d.toString("latin1")));
    socket.on("end", () => resolve(got));
    socket.on("error", reject);
  });
}

describe("writeBodyChunk on a real HTTP/1.1 response", () => {
  let close: () => void = () => undefined;
  afterEach(() => close());

  const serve = async (handler: (res: ServerResponse, path: string) => void) => {
    const server = createServer((req, res) => handler(res, req.url ?? ""));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    close = () => server.close();
    return (server.address() as AddressInfo).port;
  };

  it("sends the same chunked body as res.write, head first, then the last chunk of end()", async () => {
    const port = await serve((res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      writeBodyChunk(res, Buffer.from("data: 1\n\n"), false);
      writeBodyChunk(res, Buffer.from("data: 2\n\n"), true);
      setTimeout(() => {
        writeBodyChunk(res, Buffer.from("data: 3\n\n"), true);
        res.end();
      }, 10);
    });
    const got = await rawExchange(port, "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    const body = got.slice(got.indexOf("\r\n\r\n") + 4);
    expect(got).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(got).toMatch(/transfer-encoding: chunked/i);
    expect(body).toBe("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n9\r\ndata: 3\n\n\r\n0\r\n\r\n");
  });

  it("keeps a pipelined response's chunks behind the response before it", async () => {
    // The second request's response is written while the first still holds the socket:
    // its pieces must wait in the response, not overtake the first answer on the wire.
    let first: ServerResponse | undefined;
    const port = await serve((res, path) => {
      if (path === "/first") {
        first = res;
        res.writeHead(200, { "content-type": "text/plain" });
        writeBodyChunk(res, Buffer.from("one"), false);
        return;
      }
      res.writeHead(200, { "content-type": "text/plain" });
      writeBodyChunk(res, Buffer.from("two-a"), false);
      writeBodyChunk(res, Buffer.from("two-b"), true);
      res.end();
      setTimeout(() => first!.end(), 20);
    });
    const got = await rawExchange(
      port,
      "GET /first HTTP/1.1\r\nhost: x\r\n\r\nGET /second HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    const one = got.indexOf("3\r\none\r\n0\r\n\r\n");
    const two = got.indexOf("5\r\ntwo-a\r\n5\r\ntwo-b\r\n0\r\n\r\n");
    expect(one).toBeGreaterThan(0);
    expect(two).toBeGreaterThan(one);
  });
});
