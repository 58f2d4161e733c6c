// The TD proxy on real sockets: a simulated vLLM server on loopback behind it, quotes from the
// simulator's test quoting, and a client sealing with @zml/seal. Every refusal is checked to
// have left the server uncalled (its own payload counter).
import { createHash, X509Certificate } from "node:crypto";
import { createServer } from "node:http";
import { request } from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import {
  SEALED_MAX_CHANNELS_PER_KEY,
  SEALED_REPLAY_WINDOW,
  SEALED_REQUEST_MEDIA_TYPE,
  SEALED_RESPONSE_MEDIA_TYPE,
} from "@zml/contracts";
import { createReportDataQuoter, startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { SealedChannel } from "@zml/seal";
import type { ResponseOpener, SealedRequest, SealInput } from "@zml/seal";
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

/** One channel per session key, as a client keeps one per session. */
const channels = new Map<string, SealedChannel>();
const channelTo = (key: string) => new SealedChannel({ sessionId: SESSION, sessionPublicKey: key });

function sealed(key: string, extra: Partial<SealInput> = {}, channel?: SealedChannel) {
  const stream = extra.stream ?? false;
  if (channel === undefined) {
    channel = channels.get(key) ?? channelTo(key);
    channels.set(key, channel);
  }
  return channel.seal({
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
    stream,
    ...extra,
  });
}

/** A sealed stream's events as the wire carried them (each with its blank line). */
const wireEvents = (text: string) => text.split(/(?<=\n\n)/);

function readStream(opener: ResponseOpener, wire: string) {
  const reader = opener.streamReader();
  const parts = reader.push(Buffer.from(wire));
  reader.finish();
  return parts;
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
    const request = sealed(s.session_public_key);
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
    const request = sealed(s.session_public_key, { stream: true });
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

  it("hold the sealed head until the server's first event with data, with what came before", async () => {
    // A server that sends its headers and a keep-alive comment at once and its first token
    // only when told: the gateway's first-byte limit must run until that token, as it does for
    // a stream in clear, so nothing may leave the TD before it.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let commentSent!: () => void;
    const commented = new Promise<void>((resolve) => (commentSent = resolve));
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(": waiting for a slot\n\n", () => commentSent());
      void released.then(() => {
        res.write('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n');
        res.end("data: [DONE]\n\n");
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const held = await startTdProxy({
      backend: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      host: "127.0.0.1",
      quoter: simulatedQuoter(createReportDataQuoter(testTee.nodeTee())),
      log: silent,
    });
    try {
      const quote = await new Promise<string>((resolve, reject) => {
        request(
          `${held.url}/attestation/quote?nonce=${nonce()}&session_key=1`,
          { rejectUnauthorized: false, agent: false },
          (res) => {
            let text = "";
            res.on("data", (c: Buffer) => (text += c.toString()));
            res.on("end", () => resolve(text));
          },
        )
          .on("error", reject)
          .end();
      });
      const key = (JSON.parse(quote) as { session_public_key: string }).session_public_key;
      const sealedRequest = sealed(key, { stream: true });
      const reads: Buffer[] = [];
      let headersAt: number | undefined;
      const done = new Promise<void>((resolve, reject) => {
        const req = request(
          `${held.url}${PATH}`,
          {
            method: "POST",
            rejectUnauthorized: false,
            agent: false,
            headers: { "content-type": SEALED_REQUEST_MEDIA_TYPE },
          },
          (res) => {
            headersAt = Date.now();
            res.on("data", (c: Buffer) => reads.push(c));
            res.on("end", resolve);
            res.on("error", reject);
          },
        );
        req.on("error", reject);
        req.end(sealedRequest.bytes);
      });
      await commented;
      // The TD has the server's headers and comment; give it time it would need to pass a
      // head on (a fixed wait, but the assertion can only pass falsely, never fail falsely).
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(headersAt).toBeUndefined();
      release();
      await done;
      const reader = sealedRequest.opener.streamReader();
      const first = reader.push(reads[0]!);
      // The head, the comment and the first token came in one write.
      expect(first.map((p) => p.kind)).toEqual(["head", "event", "event"]);
      expect(first[1]).toEqual({ kind: "event", event: Buffer.from(": waiting for a slot\n\n") });
      const rest = reads.slice(1).flatMap((r) => reader.push(r));
      reader.finish();
      expect(rest.map((p) => p.kind)).toEqual(["event", "end"]);
    } finally {
      await held.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("seal the server's own errors too, with its status", async () => {
    const s = await openSession();
    const request = sealed(s.session_public_key, {
      body: Buffer.from(JSON.stringify({ model: MODEL, messages: "not a list" })),
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
    const { envelope } = sealed(s.session_public_key);
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
    // Sealed in order, as a client does; sent out of order, as concurrent requests arrive.
    const [one, two, three, far] = [1, 2, 3, 5000].map((seq) =>
      sealed(s.session_public_key, { seq }),
    ) as [SealedRequest, SealedRequest, SealedRequest, SealedRequest];
    expect((await post(three.bytes)).status).toBe(200);
    const replay = await refused(three.bytes);
    expect(replay.status).toBe(409);
    expect(errorCode(replay)).toBe("sealed_request_replayed");
    // An earlier number not yet used is still fine (requests may overtake each other).
    expect((await post(one.bytes)).status).toBe(200);
    expect((await post(far.bytes)).status).toBe(200);
    expect(errorCode(await refused(two.bytes))).toBe("sealed_request_replayed");
  });

  it("a request held back further than the window, but not one at its edge", async () => {
    const s = await openSession();
    const channel = channelTo(s.session_public_key);
    const [first, edge, last] = [0, 1, SEALED_REPLAY_WINDOW].map((seq) =>
      sealed(s.session_public_key, { seq }, channel),
    ) as [SealedRequest, SealedRequest, SealedRequest];
    expect((await post(last.bytes)).status).toBe(200);
    // WINDOW - 1 behind the highest opened: still in the window.
    expect((await post(edge.bytes)).status).toBe(200);
    // WINDOW behind: out of it, though never opened.
    const late = await refused(first.bytes);
    expect(late.status).toBe(409);
    expect(JSON.parse(late.text).error).toMatchObject({
      code: "sealed_request_replayed",
      param: "seq",
    });
  });

  it("a request relabelled to another position of its channel, which keeps both numbers", async () => {
    const s = await openSession();
    const channel = channelTo(s.session_public_key);
    const [zero, one] = [0, 1].map(() => sealed(s.session_public_key, {}, channel)) as [
      SealedRequest,
      SealedRequest,
    ];
    for (const [request, seq] of [
      [one, 0],
      [zero, 1],
      [one, 2],
    ] as const) {
      const moved = await refused(JSON.stringify({ ...request.envelope, seq }));
      expect(moved.status).toBe(400);
      expect(errorCode(moved)).toBe("sealed_request_rejected");
    }
    // The refused attempts used no number up: each request opens at its own.
    expect((await post(one.bytes)).status).toBe(200);
    expect((await post(zero.bytes)).status).toBe(200);
  });

  it("a chunk moved between two streamed answers of one channel", async () => {
    const s = await openSession();
    const channel = channelTo(s.session_public_key);
    const a = sealed(s.session_public_key, { stream: true }, channel);
    const b = sealed(s.session_public_key, { stream: true }, channel);
    const [wireA, wireB] = [(await post(a.bytes)).text, (await post(b.bytes)).text];
    expect(readStream(a.opener, wireA).at(-1)).toEqual({ kind: "end" });
    expect(readStream(b.opener, wireB).at(-1)).toEqual({ kind: "end" });
    const eventsA = wireEvents(wireA);
    const eventsB = wireEvents(wireB);
    // b's second event put in a's place, b's final chunk ending a, b's answer whole for a.
    const moved = [...eventsA];
    moved[2] = eventsB[2]!;
    expect(() => readStream(a.opener, moved.join(""))).toThrow(/chunk 2 of the stream/);
    const ended = [...eventsA];
    ended[ended.length - 1] = eventsB.at(-1)!;
    expect(() => readStream(a.opener, ended.join(""))).toThrow(/does not open/);
    expect(() => readStream(a.opener, wireB)).toThrow(/does not open/);
  });

  it("channels of one key each have their own numbers, up to the limit", async () => {
    const s = await openSession();
    const channel = () => channelTo(s.session_public_key);
    const first = channel();
    const second = channel();
    // Each channel's seq 0 opens: the numbers are per channel.
    expect((await post(sealed(s.session_public_key, {}, first).bytes)).status).toBe(200);
    expect((await post(sealed(s.session_public_key, {}, second).bytes)).status).toBe(200);
    // A request under another channel's enc does not open, and sets up nothing.
    const own = sealed(s.session_public_key, {}, first);
    const swapped = await refused(JSON.stringify({ ...own.envelope, enc: second.enc }));
    expect(errorCode(swapped)).toBe("sealed_request_rejected");
    // An enc that is no X25519 key takes no place either.
    const zero = Buffer.alloc(32).toString("base64url");
    const bad = await refused(JSON.stringify({ ...own.envelope, enc: zero }));
    expect(JSON.parse(bad.text).error).toMatchObject({
      code: "sealed_request_rejected",
      param: "enc",
    });
    for (let i = 2; i < SEALED_MAX_CHANNELS_PER_KEY; i++) {
      expect((await post(sealed(s.session_public_key, {}, channel()).bytes)).status).toBe(200);
    }
    const beyond = await refused(sealed(s.session_public_key, {}, channel()).bytes);
    expect(JSON.parse(beyond.text).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "enc",
    });
    // The channels it keeps still serve.
    expect((await post(own.bytes)).status).toBe(200);
  });

  it("a request sealed to another session's key, or to a key the TD dropped", async () => {
    const a = await openSession();
    const b = await openSession();
    const toB = sealed(b.session_public_key);
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
      expect(errorCode(await refused(sealed(s.session_public_key).bytes))).toBe(
        "session_key_unknown",
      );
    } finally {
      clock -= 61_000;
    }
  });

  it("a body whose clear fields lie about it", async () => {
    const s = await openSession();
    const lying = sealed(s.session_public_key, {
      body: Buffer.from(JSON.stringify({ model: "other-model", messages: [] })),
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
    const { bytes } = sealed(s.session_public_key);
    expect(errorCode(await refused(bytes, SEALED_REQUEST_MEDIA_TYPE, "/v1/completions"))).toBe(
      "sealed_request_rejected",
    );
  });

  it("an envelope that is not one, and a plain request on a tier-4 TD", async () => {
    const s = await openSession();
    const { envelope } = sealed(s.session_public_key);
    const extra = await refused(JSON.stringify({ ...envelope, messages: [] }));
    expect(JSON.parse(extra.text).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "messages",
    });
    // The previous format (an HPKE setup per request) is refused by its version, by name.
    const v1 = await refused(JSON.stringify({ ...envelope, zml_sealed: 1 }));
    expect(JSON.parse(v1.text).error).toMatchObject({
      code: "sealed_request_invalid",
      param: "zml_sealed",
      message: expect.stringContaining("version 2"),
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
