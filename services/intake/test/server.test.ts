import { request as httpRequest } from "node:http";
import { connect as h2connect } from "node:http2";
import type { ClientHttp2Session, IncomingHttpHeaders } from "node:http2";
import { request as httpsRequest } from "node:https";
import { connect as netConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { createTestCertificate, startNatsServer } from "@zml/harness";
import type { NatsServerHandle, TestCertificate } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

/** HTTP versions, TLS with ALPN, h2c, and the body/header limits, on real sockets. */

let nats: NatsServerHandle;
beforeAll(async () => {
  nats = await startNatsServer();
});
afterAll(async () => {
  await nats?.stop();
});

interface H2Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

function h2call(
  session: ClientHttp2Session,
  headers: Record<string, string>,
  body?: Buffer | string,
  endStream = true,
): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined && endStream });
    let text = "";
    let got: IncomingHttpHeaders = {};
    stream.setEncoding("utf8");
    stream.on("response", (h) => (got = h));
    stream.on("data", (c: string) => (text += c));
    stream.on("end", () => resolve({ status: Number(got[":status"]), headers: got, body: text }));
    stream.on("error", reject);
    if (body !== undefined) {
      if (endStream) stream.end(body);
      else stream.write(body);
    }
  });
}

/** Sends raw bytes and collects what comes back until the server closes the connection. */
function raw(url: string, bytes: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = netConnect(Number(port), hostname, () => socket.write(bytes));
    let out = "";
    socket.setEncoding("latin1");
    socket.on("data", (c: string) => (out += c));
    socket.on("close", () => resolve(out));
    socket.on("error", reject);
  });
}

describe("cleartext: HTTP/1.1 and h2c on one port", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startIntake({
      nats,
      config: { ZML_BODY_TIMEOUT_MS: 500, ZML_HEADERS_TIMEOUT_MS: 500 },
    });
  });
  afterAll(async () => {
    await h?.close();
  });

  it("answers HTTP/1.1", async () => {
    const res = await fetch(`${h.url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("answers HTTP/2 with prior knowledge, including request bodies", async () => {
    const session = h2connect(h.url);
    try {
      const health = await h2call(session, { ":path": "/healthz" });
      expect(health.status).toBe(200);
      const models = await h2call(
        session,
        {
          ":method": "POST",
          ":path": "/v1/chat/completions",
          authorization: `Bearer ${API_KEY}`,
        },
        JSON.stringify({ model: "nope", messages: [{ role: "user", content: "x" }] }),
      );
      expect(models.status).toBe(404);
      expect(errorOf(models.body)).toMatchObject({ code: "unknown_model", param: "model" });
    } finally {
      session.close();
    }
  });

  it("answers 413 with a clear error to an oversize body, over both versions", async () => {
    const big = Buffer.alloc(100 * 1024, 0x61);
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_KEY}` },
      body: big,
    });
    expect(res.status).toBe(413);
    expect(errorOf(await res.text())).toEqual({
      code: "payload_too_large",
      param: "body",
      type: "invalid_request_error",
    });
    const session = h2connect(h.url);
    try {
      const ans = await h2call(
        session,
        { ":method": "POST", ":path": "/v1/chat/completions" },
        big,
      );
      expect(ans.status).toBe(413);
      expect(errorOf(ans.body).code).toBe("payload_too_large");
    } finally {
      session.close();
    }
  });

  it("answers 413 to an oversize chunked body that announces no length", async () => {
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(`${h.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${API_KEY}`, "transfer-encoding": "chunked" },
      });
      req.on("response", (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", reject);
      for (let i = 0; i < 10; i++) req.write(Buffer.alloc(10 * 1024, 0x61));
      req.end();
    });
    expect(answer.status).toBe(413);
    expect(errorOf(answer.body).code).toBe("payload_too_large");
  });

  it("answers 408 to a body that does not arrive in time, over both versions", async () => {
    const out = await raw(
      h.url,
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${API_KEY}\r\ncontent-length: 100\r\n\r\n{"model":`,
    );
    expect(out).toMatch(/^HTTP\/1\.1 408 /);
    expect(out).toMatch(/"code":"request_timeout"/);
    const session = h2connect(h.url);
    try {
      const ans = await h2call(
        session,
        { ":method": "POST", ":path": "/v1/chat/completions" },
        '{"model":',
        false,
      );
      expect(ans.status).toBe(408);
      expect(errorOf(ans.body)).toMatchObject({ code: "request_timeout", param: "body" });
    } finally {
      session.close();
    }
  });

  it("drops a connection whose headers never finish", async () => {
    const out = await raw(h.url, "GET /healthz HTTP/1.1\r\nhost: x\r\n");
    expect(out).not.toMatch(/200 OK/);
  });

  it("drops a connection that never says anything", async () => {
    expect(await raw(h.url, "")).toBe("");
  });

  it("rejects header injection at the protocol level and stays up", async () => {
    const out = await raw(h.url, "GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: b\rinjected: 1\r\n\r\n");
    expect(out).toMatch(/^HTTP\/1\.1 400 /);
    expect((await fetch(`${h.url}/healthz`)).status).toBe(200);
  });
});

describe("TLS with ALPN", () => {
  let h: Harness;
  let cert: Buffer;
  let tls: TestCertificate;
  beforeAll(async () => {
    tls = createTestCertificate();
    cert = tls.cert;
    h = await startIntake({ nats, tls: { cert, key: tls.key } });
  });
  afterAll(async () => {
    await h?.close();
    tls?.dispose();
  });

  it("negotiates h2 and http/1.1 by ALPN", async () => {
    const { port } = new URL(h.url);
    const alpn = (protocols: string[]) =>
      new Promise<string | false>((resolve, reject) => {
        const s = tlsConnect(
          { port: Number(port), host: "127.0.0.1", ca: cert, ALPNProtocols: protocols },
          () => {
            resolve(s.alpnProtocol ?? false);
            s.end();
          },
        );
        s.on("error", reject);
      });
    expect(await alpn(["h2", "http/1.1"])).toBe("h2");
    expect(await alpn(["http/1.1"])).toBe("http/1.1");
  });

  it("serves HTTP/2 over TLS", async () => {
    const session = h2connect(h.url, { ca: cert });
    try {
      const ans = await h2call(session, { ":path": "/openapi.json" });
      expect(ans.status).toBe(200);
      expect(JSON.parse(ans.body).openapi).toBe("3.1.0");
    } finally {
      session.close();
    }
  });

  it("serves HTTP/1.1 over TLS", async () => {
    const answer = await new Promise<{ status: number; version: string }>((resolve, reject) => {
      const req = httpsRequest(`${h.url}/healthz`, { ca: cert }, (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, version: res.httpVersion });
      });
      req.on("error", reject);
      req.end();
    });
    expect(answer).toEqual({ status: 200, version: "1.1" });
  });
});

describe("key store outage", () => {
  it("answers 503 key_store_unavailable, never 401, when the accounts cannot be trusted", async () => {
    const h = await startIntake({ nats, keyStoreMaxStaleMs: 0 });
    try {
      // The key store tracks the bus connection; stop the bus so it goes stale.
      await h.bus.drain();
      for (const key of [API_KEY, "unknown-key"]) {
        const res = await fetch(`${h.url}/v1/models`, {
          headers: { authorization: `Bearer ${key}` },
        });
        expect(res.status).toBe(503);
        expect(res.headers.get("retry-after")).toBe("1");
        expect(errorOf(await res.text()).code).toBe("key_store_unavailable");
      }
    } finally {
      await h.close();
    }
  });
});
