// The TD proxy on real sockets: a simulated vLLM server on loopback behind it, quotes from the
// simulator's test quoting, and a client sealing with @zml/seal. Every refusal is checked to
// have left the server uncalled (its own payload counter).
import { createHash, X509Certificate } from "node:crypto";
import { request } from "node:https";
import type { TLSSocket } from "node:tls";
import { SEALED_REQUEST_MEDIA_TYPE, SEALED_RESPONSE_MEDIA_TYPE } from "@zml/contracts";
import { createReportDataQuoter, startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { sealRequest } from "@zml/seal";
import type { SealRequestInput } from "@zml/seal";
import { reportDataFor, spkiSha256, verifyQuote } from "@zml/tdx";
import { createTestTee, TEST_MRTD } from "@zml/tdx/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { simulatedQuoter, startTdProxy } from "../src/index.ts";
import type { TdProxy } from "../src/index.ts";

const testTee = createTestTee();
const { pki, collateral } = testTee;
const MRTD = TEST_MRTD;
const MODEL = "llama-3-8b";
const PATH = "/v1/chat/completions";
const SESSION = `ses-${"12".repeat(16)}`;
const silent = { info() {}, warn() {}, error() {} };

let sim: SimNode;
let proxy: TdProxy;
let clock = Date.now();

interface Answer {
  status: number;
  type: string;
  text: string;
  bytes: Buffer;
  peerKeySha256: string;
}

/** One HTTPS request on its own connection, noting the key the proxy presented. */
function call(
  path: string,
  init: { method?: string; body?: Uint8Array | string; type?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${proxy.url}${path}`,
      {
        method: init.method ?? "GET",
        rejectUnauthorized: false,
        agent: false,
        headers: init.type === undefined ? {} : { "content-type": init.type },
      },
      (res) => {
        const peer = (res.socket as TLSSocket).getPeerCertificate();
        const peerKeySha256 = spkiSha256(new X509Certificate(peer.raw).publicKey);
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const bytes = Buffer.concat(chunks);
          resolve({
            status: res.statusCode ?? 0,
            type: String(res.headers["content-type"] ?? ""),
            text: bytes.toString(),
            bytes,
            peerKeySha256,
          });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(init.body);
  });
}

const nonce = () => createHash("sha256").update(String(Math.random())).digest("hex");

async function openSession(ttlS?: number) {
  const n = nonce();
  const res = await call(
    `/attestation/quote?nonce=${n}&session_key=1${ttlS ? `&ttl_s=${ttlS}` : ""}`,
  );
  expect(res.status, res.text).toBe(200);
  const answer = JSON.parse(res.text) as { quote_b64: string; session_public_key: string };
  return { nonce: n, ...answer, tlsKeySha256: res.peerKeySha256 };
}

async function sealed(key: string, extra: Partial<SealRequestInput> = {}) {
  const stream = extra.stream ?? false;
  return sealRequest({
    path: PATH,
    body: Buffer.from(
      JSON.stringify({
        model: MODEL,
        stream,
        messages: [{ role: "user", content: "the secret prompt" }],
        max_tokens: 4,
      }),
    ),
    model: MODEL,
    sessionId: SESSION,
    stream,
    seq: 0,
    sessionPublicKey: key,
    ...extra,
  });
}

const post = (bytes: Uint8Array, path = PATH) =>
  call(path, { method: "POST", body: bytes, type: SEALED_REQUEST_MEDIA_TYPE });
const serverCalls = () => sim.stats().payloads_received;
const errorCode = (a: Answer) => (JSON.parse(a.text) as { error: { code: string } }).error.code;

beforeAll(async () => {
  sim = await startSimNode({
    nodeId: "backend",
    flavour: "vllm",
    models: [MODEL],
    completionTokens: 4,
  });
  proxy = await startTdProxy({
    backend: sim.url,
    host: "127.0.0.1",
    quoter: simulatedQuoter(createReportDataQuoter(testTee.nodeTee())),
    log: silent,
    clock: () => clock,
  });
});

afterAll(async () => {
  await proxy?.close();
  await sim?.close();
});

describe("quotes", () => {
  it("bind the nonce, the TLS key the proxy presents and a fresh session key", async () => {
    const s = await openSession();
    expect(s.tlsKeySha256).toBe(proxy.tlsKeySha256);
    const sessionKeySha256 = createHash("sha256")
      .update(Buffer.from(s.session_public_key, "base64"))
      .digest("hex");
    const verification = verifyQuote({
      quote: s.quote_b64,
      collateral,
      at: new Date(),
      trustedRootPem: pki.root.pem,
      policy: {
        approvedMeasurements: [{ mrtd: MRTD }],
        expectedReportData: reportDataFor({
          nonce: s.nonce,
          tlsKeySha256: proxy.tlsKeySha256,
          sessionKeySha256,
        }),
      },
    });
    expect(verification.checks.filter((c) => !c.ok)).toEqual([]);
    expect((await openSession()).session_public_key).not.toBe(s.session_public_key);
  });

  it("without session_key bind no session key, and refuse a bad nonce or ttl", async () => {
    const n = nonce();
    const plain = await call(`/attestation/quote?nonce=${n}`);
    expect(plain.status).toBe(200);
    expect(JSON.parse(plain.text)).not.toHaveProperty("session_public_key");
    const bad = await call("/attestation/quote?nonce=abc");
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text).error).toMatchObject({ code: "invalid_request", param: "nonce" });
    const ttl = await call(`/attestation/quote?nonce=${n}&session_key=1&ttl_s=0`);
    expect(JSON.parse(ttl.text).error).toMatchObject({ param: "ttl_s" });
  });
});

describe("sealed requests", () => {
  it("are opened, served by the local server and answered sealed", async () => {
    const s = await openSession();
    const before = serverCalls();
    const request = await sealed(s.session_public_key);
    const res = await post(request.bytes);
    expect(res.status, res.text).toBe(200);
    expect(res.type).toBe(SEALED_RESPONSE_MEDIA_TYPE);
    expect(serverCalls()).toBe(before + 1);
    // The server saw the client's own bytes; nothing readable came back on the wire.
    expect(res.text).not.toContain("choices");
    const opened = request.opener.openAnswer(res.bytes);
    expect(opened).toMatchObject({
      status: 200,
      contentType: expect.stringContaining("application/json"),
    });
    const completion = JSON.parse(opened.body.toString()) as {
      choices: Array<{ message: { content: string } }>;
    };
    expect(completion.choices[0]!.message.content.length).toBeGreaterThan(0);
  });

  it("stream event by event, ending with the final chunk", async () => {
    const s = await openSession();
    const request = await sealed(s.session_public_key, { stream: true });
    const res = await post(request.bytes);
    expect(res.status).toBe(200);
    expect(res.type).toContain("text/event-stream");
    expect(res.text).toMatch(/event: final\ndata: [\w-]+\n\n$/);
    const reader = request.opener.streamReader();
    const parts = reader.push(res.bytes);
    reader.finish();
    expect(parts[0]).toEqual({
      kind: "head",
      head: { status: 200, content_type: "text/event-stream" },
    });
    const events = parts.flatMap((p) => (p.kind === "event" ? [p.event.toString()] : []));
    expect(events.at(-1)).toBe("data: [DONE]\n\n");
    expect(events.some((e) => e.includes('"finish_reason":"'))).toBe(true);
    expect(parts.at(-1)).toEqual({ kind: "end" });
  });

  it("seal the server's own errors too, with its status", async () => {
    const s = await openSession();
    const request = await sealRequest({
      path: PATH,
      body: Buffer.from(JSON.stringify({ model: MODEL, messages: "not a list" })),
      model: MODEL,
      sessionId: SESSION,
      stream: false,
      seq: 0,
      sessionPublicKey: s.session_public_key,
    });
    const res = await post(request.bytes);
    expect(res.status).toBe(400);
    const opened = request.opener.openAnswer(res.bytes);
    expect(opened.status).toBe(400);
    expect(opened.body.toString()).toContain("messages");
  });
});

describe("refused without calling the server", () => {
  const refused = async (
    bytes: Uint8Array | string,
    type = SEALED_REQUEST_MEDIA_TYPE,
    path = PATH,
  ) => {
    const before = serverCalls();
    const res = await call(path, { method: "POST", body: bytes, type });
    expect(serverCalls()).toBe(before);
    return res;
  };

  it("a tampered ciphertext", async () => {
    const s = await openSession();
    const { envelope } = await sealed(s.session_public_key);
    const ct = Buffer.from(envelope.ciphertext, "base64url");
    ct[5]! ^= 1;
    const res = await refused(
      JSON.stringify({ ...envelope, ciphertext: ct.toString("base64url") }),
    );
    expect(res.status).toBe(400);
    expect(errorCode(res)).toBe("sealed_request_rejected");
  });

  it("a replayed request, but not the next one", async () => {
    const s = await openSession();
    const first = await sealed(s.session_public_key, { seq: 3 });
    expect((await post(first.bytes)).status).toBe(200);
    const replay = await refused(first.bytes);
    expect(replay.status).toBe(409);
    expect(errorCode(replay)).toBe("sealed_request_replayed");
    // An earlier number not yet used is still fine (requests may overtake each other).
    expect((await post((await sealed(s.session_public_key, { seq: 1 })).bytes)).status).toBe(200);
    const tooOld = await sealed(s.session_public_key, { seq: 5000 });
    expect((await post(tooOld.bytes)).status).toBe(200);
    expect(errorCode(await refused((await sealed(s.session_public_key, { seq: 2 })).bytes))).toBe(
      "sealed_request_replayed",
    );
  });

  it("a request sealed to another session's key, or to a key the TD dropped", async () => {
    const a = await openSession();
    const b = await openSession();
    const toB = await sealed(b.session_public_key);
    // Sealed to B's key but labelled A's: B's key does not open it under A's id.
    const keyIdA = createHash("sha256")
      .update(Buffer.from(a.session_public_key, "base64"))
      .digest("hex");
    const relabelled = await refused(JSON.stringify({ ...toB.envelope, key_id: keyIdA }));
    expect(errorCode(relabelled)).toBe("sealed_request_rejected");
    const dropped = await call(`/attestation/session-keys/${toB.envelope.key_id}`, {
      method: "DELETE",
    });
    expect(dropped.status).toBe(204);
    const gone = await refused(toB.bytes);
    expect(gone.status).toBe(410);
    expect(errorCode(gone)).toBe("session_key_unknown");
  });

  it("a key past its session's ttl", async () => {
    const s = await openSession(60);
    clock += 61_000;
    try {
      expect(errorCode(await refused((await sealed(s.session_public_key)).bytes))).toBe(
        "session_key_unknown",
      );
    } finally {
      clock -= 61_000;
    }
  });

  it("a body whose clear fields lie about it", async () => {
    const s = await openSession();
    const lying = await sealRequest({
      path: PATH,
      body: Buffer.from(JSON.stringify({ model: "other-model", messages: [] })),
      model: MODEL,
      sessionId: SESSION,
      stream: false,
      seq: 0,
      sessionPublicKey: s.session_public_key,
    });
    const res = await refused(lying.bytes);
    expect(res.status).toBe(400);
    const opened = lying.opener.openAnswer(res.bytes);
    expect(JSON.parse(opened.body.toString()).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "model",
    });
  });

  it("a request sent to another path than it was sealed for", async () => {
    const s = await openSession();
    const { bytes } = await sealed(s.session_public_key);
    expect(errorCode(await refused(bytes, SEALED_REQUEST_MEDIA_TYPE, "/v1/completions"))).toBe(
      "sealed_request_rejected",
    );
  });

  it("an envelope that is not one, and a plain request on a tier-4 TD", async () => {
    const s = await openSession();
    const { envelope } = await sealed(s.session_public_key);
    const extra = await refused(JSON.stringify({ ...envelope, messages: [] }));
    expect(JSON.parse(extra.text).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "messages",
    });
    const notJson = await refused("{");
    expect(JSON.parse(notJson.text).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "body",
    });
    const plain = await refused(JSON.stringify({ model: MODEL, messages: [] }), "application/json");
    expect(plain.status).toBe(400);
    expect(errorCode(plain)).toBe("sealed_body_required");
  });
});

describe("health probes", () => {
  it("reach the server's /health and /metrics, and nothing else does", async () => {
    expect((await call("/health")).status).toBe(200);
    expect((await call("/metrics")).text).toContain("vllm:");
    expect((await call("/_sim/stats")).status).toBe(404);
  });
});
