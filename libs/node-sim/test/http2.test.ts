// The simulator over HTTP/2: h2c (prior knowledge) and h2 (TLS, ALPN), spoken to by node's own
// HTTP/2 client on real sockets. Same wire formats, pacing and slots as over HTTP/1.1.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:http2";
import type { ClientHttp2Session, IncomingHttpHeaders } from "node:http2";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimInputError, startSimNode } from "../src/index.ts";
import type { SimNode, SimNodeOptions, SimStats } from "../src/index.ts";
import { CHAT_BODY, metricValue, sseData, waitFor } from "./helpers.ts";

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request on an HTTP/2 session; resolves with the whole answer, rejects on a reset. */
function h2(
  session: ClientHttp2Session,
  path: string,
  body?: unknown,
  method = body === undefined ? "GET" : "POST",
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": method,
      ":path": path,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    });
    let headers: IncomingHttpHeaders = {};
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (headers = h));
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => {
      if (headers[":status"] === undefined) reject(new Error("stream ended without an answer"));
      else resolve({ status: Number(headers[":status"]), headers, body: text });
    });
    stream.on("error", reject);
    stream.end(
      body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    );
  });
}

let certDir: string;
let tls: { keyPem: string; certPem: string };

beforeAll(() => {
  // A certificate for 127.0.0.1 that the client below trusts, as the bench makes one.
  certDir = mkdtempSync(join(tmpdir(), "zml-sim-h2-"));
  execFileSync("openssl", [
    ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", join(certDir, "key.pem"), "-out", join(certDir, "cert.pem"), "-days", "1"],
    ...["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
  ]);
  tls = {
    keyPem: readFileSync(join(certDir, "key.pem"), "utf8"),
    certPem: readFileSync(join(certDir, "cert.pem"), "utf8"),
  };
});

afterAll(() => {
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

const base: Pick<SimNodeOptions, "flavour" | "models"> = {
  flavour: "vllm",
  models: ["llama-3-8b"],
};

async function startOver(
  protocol: "h2c" | "h2",
  extra: Partial<SimNodeOptions> = {},
): Promise<{ node: SimNode; session: ClientHttp2Session }> {
  const node = await startSimNode({
    ...base,
    nodeId: `n-${protocol}`,
    protocol,
    ...(protocol === "h2" ? { certificate: tls } : {}),
    ...extra,
  });
  // Full verification: the chain to the given certificate and its IP address.
  const session = connect(node.url, protocol === "h2" ? { ca: tls.certPem } : {});
  session.on("error", () => {});
  return { node, session };
}

describe.each(["h2c", "h2"] as const)("a node serving %s", (protocol) => {
  let node: SimNode;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    ({ node, session } = await startOver(protocol, { completionTokens: 5, tokensPerSecond: 100 }));
  });
  afterAll(async () => {
    session?.close();
    await node?.close();
  });

  it("has the URL scheme of its protocol and negotiates HTTP/2", async () => {
    expect(node.url).toMatch(protocol === "h2" ? /^https:\/\// : /^http:\/\//);
    const health = await h2(session, "/health");
    expect(health.status).toBe(200);
    expect(session.alpnProtocol).toBe(protocol);
  });

  it("answers a chat completion with the OpenAI JSON body", async () => {
    const answer = await h2(session, "/v1/chat/completions", CHAT_BODY);
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/json");
    expect(answer.headers["x-sim-node"]).toBe(`n-${protocol}`);
    const body = JSON.parse(answer.body) as {
      object: string;
      choices: Array<{ message: { content: string } }>;
      usage: { completion_tokens: number };
    };
    expect(body.object).toBe("chat.completion");
    expect(body.usage.completion_tokens).toBe(5);
    expect(body.choices[0]?.message.content.length).toBeGreaterThan(0);
    const stats = JSON.parse((await h2(session, "/_sim/stats")).body) as SimStats;
    expect(stats.last_request?.http_version).toBe("2.0");
    expect(stats.last_request?.path).toBe("/v1/chat/completions");
  });

  it("streams paced SSE events that end with [DONE], many streams on one session", async () => {
    const answers = await Promise.all(
      Array.from({ length: 20 }, () =>
        h2(session, "/v1/chat/completions", { ...CHAT_BODY, stream: true }),
      ),
    );
    const contents = new Set<string>();
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
      const data = sseData(answer.body);
      expect(data.at(-1)).toBe("[DONE]");
      const tokens = data
        .slice(0, -1)
        .map((d) => JSON.parse(d) as { choices: Array<{ delta: { content?: string } }> })
        .filter((c) => (c.choices[0]?.delta.content ?? "").length > 0);
      expect(tokens).toHaveLength(5);
      contents.add(tokens.map((c) => c.choices[0]?.delta.content).join(""));
    }
    // Each stream has its own id; the generated text is the same for every one.
    expect(contents.size).toBe(1);
  });

  it("holds requests beyond max_concurrency in the queue and shows it in /metrics", async () => {
    const { node: slow, session: s } = await startOver(protocol, {
      maxConcurrency: 2,
      ttftMs: 400,
    });
    try {
      const pending = Array.from({ length: 5 }, () => h2(s, "/v1/chat/completions", CHAT_BODY));
      await waitFor(
        () => slow.stats(),
        (st) => st.running === 2 && st.waiting === 3,
        "2 running and 3 waiting",
      );
      const metrics = await h2(s, "/metrics");
      expect(metrics.status).toBe(200);
      expect(metricValue(metrics.body, 'vllm:num_requests_running{model_name="llama-3-8b"}')).toBe(
        2,
      );
      expect(metricValue(metrics.body, 'vllm:num_requests_waiting{model_name="llama-3-8b"}')).toBe(
        3,
      );
      const answers = await Promise.all(pending);
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    } finally {
      s.close();
      await slow.close();
    }
  });

  it("a reset fault resets that stream only; the session goes on", async () => {
    node.setFault({ kind: "reset", times: 1 });
    await expect(h2(session, "/v1/chat/completions", CHAT_BODY)).rejects.toMatchObject({
      code: "ERR_HTTP2_STREAM_ERROR",
    });
    const next = await h2(session, "/v1/chat/completions", CHAT_BODY);
    expect(next.status).toBe(200);
    expect(session.closed).toBe(false);
  });

  it("answers an oversized body with 413 and keeps the session", async () => {
    const big = JSON.stringify({ ...CHAT_BODY, pad: "x".repeat(9 * 1024 * 1024) });
    const answer = await h2(session, "/v1/chat/completions", big);
    expect(answer.status).toBe(413);
    expect((await h2(session, "/health")).status).toBe(200);
  });
});

describe.each(["h2c", "h2"] as const)("HTTP/1.1 on a %s node's port", (protocol) => {
  it("is answered too (health probes), and counted apart from HTTP/2", async () => {
    const { node, session } = await startOver(protocol);
    try {
      // ALPN picks HTTP/1.1 on TLS; the missing connection preface tells it apart on h2c.
      const version = await new Promise<string>((resolve, reject) => {
        const req = (protocol === "h2" ? httpsRequest : httpRequest)(
          `${node.url}/v1/chat/completions`,
          {
            method: "POST",
            headers: { "content-type": "application/json" },
            ...(protocol === "h2" ? { ca: tls.certPem } : {}),
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve(`${res.statusCode} ${res.httpVersion}`));
          },
        );
        req.on("error", reject);
        req.end(JSON.stringify(CHAT_BODY));
      });
      expect(version).toBe("200 1.1");
      expect((await h2(session, "/v1/chat/completions", CHAT_BODY)).status).toBe(200);
      expect(node.stats().payloads_by_http_version).toEqual({ "1.1": 1, "2.0": 1 });
      node.resetStats();
      expect(node.stats().payloads_by_http_version).toEqual({});
    } finally {
      session.close();
      await node.close();
    }
  });
});

describe("h2 over TLS", () => {
  it("presents a fresh self-signed key when no certificate is given", async () => {
    await using node = await startSimNode({ ...base, nodeId: "self", protocol: "h2" });
    const session = connect(node.url, { rejectUnauthorized: false });
    try {
      expect((await h2(session, "/health")).status).toBe(200);
      expect(session.alpnProtocol).toBe("h2");
      expect(node.stats().tls_key_sha256).toMatch(/^[0-9a-f]{64}$/);
    } finally {
      session.close();
    }
  });

  it("close() ends open sessions, hanging streams included", async () => {
    const { node, session } = await startOver("h2c");
    node.setFault({ kind: "hang" });
    const hanging = h2(session, "/v1/chat/completions", CHAT_BODY).then(
      () => "answered",
      () => "ended",
    );
    await waitFor(
      () => node.stats().payloads_received,
      (n) => n === 1,
      "the request to arrive",
    );
    await node.close();
    expect(await hanging).toBe("ended");
  });
});

describe("protocol options", () => {
  it.each([
    [{ protocol: "h3" }, "options.protocol"],
    [{ protocol: "h2c", tls: true }, "options.protocol"],
    [{ protocol: "http1", certificate: { keyPem: "k", certPem: "c" } }, "options.certificate"],
  ] as Array<[Record<string, unknown>, string]>)("rejects %j naming %s", async (extra, field) => {
    const options = { ...base, nodeId: "bad", ...extra } as unknown as SimNodeOptions;
    const error = await startSimNode(options).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(SimInputError);
    expect(error).toMatchObject({ code: "invalid_options", field });
  });
});
