// The sealed channel end to end in one process: what a client seals only the session key's
// holder opens, each request only at its own number in its own channel, each answer only for
// the request it answers, and every change on the way (a flipped bit, a changed clear field, a
// relabelled number, a chunk dropped, reordered, moved to another answer or added) is refused.
import { createDecipheriv, createHmac } from "node:crypto";
import {
  SEALED_AAD_PREFIX,
  SEALED_ANSWER_EXPORT_LABEL,
  SEALED_CHANNEL_INFO,
  sealedRequestAad,
} from "@zml/contracts/sealed";
import type { SealedRequestEnvelope, SealedSuite } from "@zml/contracts/sealed";
import { describe, expect, it } from "vitest";
import {
  createSessionKeyPair,
  RecipientChannel,
  SealedChannel,
  SealedChannelError,
  sessionPublicKeyOf,
} from "../src/index.ts";
import type { SealInput, SessionKeyPair } from "../src/index.ts";
import { newResponseNonce } from "../src/response-keys.ts";

const PATH = "/v1/chat/completions";
const SESSION = `ses-${"ab".repeat(16)}`;
const body = (stream = false) =>
  Buffer.from(
    JSON.stringify({
      model: "m1",
      stream,
      messages: [{ role: "user", content: "the secret prompt" }],
    }),
  );

function channelTo(key: SessionKeyPair, suite?: SealedSuite): SealedChannel {
  return new SealedChannel({
    sessionId: SESSION,
    sessionPublicKey: key.publicKeySpki.toString("base64"),
    ...(suite === undefined ? {} : { suite }),
  });
}

function seal(channel: SealedChannel, extra: Partial<SealInput> = {}) {
  return channel.seal({
    path: PATH,
    body: body(extra.stream),
    model: "m1",
    stream: false,
    ...extra,
  });
}

/** The TD's side: the recipient channel of the envelope's `enc`, then the request opened. */
function open(key: SessionKeyPair, envelope: SealedRequestEnvelope, path = PATH) {
  return new RecipientChannel(key, envelope.suite, envelope.enc).open(envelope, path);
}

function refusalOf(run: () => unknown): SealedChannelError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(SealedChannelError);
    return error as SealedChannelError;
  }
  throw new Error("expected a refusal");
}

describe("session keys", () => {
  it("publish SPKI DER whose SHA-256 is the key id", () => {
    const key = createSessionKeyPair();
    const pub = sessionPublicKeyOf(key.publicKeySpki.toString("base64"));
    expect(pub.keyId).toBe(key.keyId);
    expect(pub.raw).toHaveLength(32);
    expect(pub.raw.equals(key.publicKeyRaw)).toBe(true);
    expect(() => sessionPublicKeyOf(Buffer.alloc(44).toString("base64"))).toThrow(TypeError);
  });
});

describe.each(["x25519-sha256-chacha20poly1305", "x25519-sha256-aes128gcm"] as const)(
  "%s",
  (suite) => {
    it("round-trips requests of one channel and their whole answers", () => {
      const key = createSessionKeyPair();
      const channel = channelTo(key, suite);
      const first = seal(channel, { policy: "p", maxTokens: 9 });
      expect(first.envelope).toMatchObject({
        zml_sealed: 2,
        model: "m1",
        session_id: SESSION,
        tier: 4,
        policy: "p",
        max_tokens: 9,
        stream: false,
        suite,
        key_id: key.keyId,
        seq: 0,
        enc: channel.enc,
      });
      expect(Buffer.from(first.bytes).includes("secret prompt")).toBe(false);
      const td = new RecipientChannel(key, suite, channel.enc);
      const opened = td.open(first.envelope, PATH);
      expect(opened.body.equals(body())).toBe(true);
      const answer = opened.sealer.answer(
        { status: 200, content_type: "application/json" },
        Buffer.from('{"answer":"the secret reply"}'),
      );
      expect(answer.includes("secret reply")).toBe(false);
      expect(first.opener.openAnswer(answer)).toEqual({
        status: 200,
        contentType: "application/json",
        body: Buffer.from('{"answer":"the secret reply"}'),
      });

      // The next requests of the channel: the same enc, the next numbers, one setup.
      const second = seal(channel);
      const third = seal(channel, { seq: 10 });
      expect([second.envelope.seq, third.envelope.seq]).toEqual([1, 10]);
      expect(second.envelope.enc).toBe(first.envelope.enc);
      expect(td.open(third.envelope, PATH).body.equals(body())).toBe(true);
      const reply = td.open(second.envelope, PATH).sealer;
      // A body-less answer is its head alone, sealed as final.
      const headOnly = reply.answer({ status: 204, content_type: "text/plain" }, Buffer.alloc(0));
      expect(JSON.parse(headOnly.toString()).chunks).toHaveLength(1);
      expect(second.opener.openAnswer(headOnly).status).toBe(204);
    });

    it("round-trips a stream event by event", () => {
      const key = createSessionKeyPair();
      const request = seal(channelTo(key, suite), { stream: true });
      const { sealer } = open(key, request.envelope);
      const events = ['data: {"n":1}\n\n', 'data: {"n":2}\n\n', "data: [DONE]\n\n"];
      const wire = Buffer.concat([
        sealer.streamHead({ status: 200, content_type: "text/event-stream" }),
        ...events.map((e) => sealer.streamEvent(Buffer.from(e))),
        sealer.streamEnd(),
      ]);
      expect(wire.includes('"n"')).toBe(false);
      const reader = request.opener.streamReader();
      // Delivered in odd slices: parts come out whole whatever the cuts.
      const parts = [];
      for (let i = 0; i < wire.length; i += 7) parts.push(...reader.push(wire.subarray(i, i + 7)));
      reader.finish();
      expect(parts).toEqual([
        { kind: "head", head: { status: 200, content_type: "text/event-stream" } },
        ...events.map((e) => ({ kind: "event", event: Buffer.from(e) })),
        { kind: "end" },
      ]);
    });
  },
);

describe("the channel's keys", () => {
  it("are HPKE's context for the channel's info, and each answer's HKDF-Expand(answer secret, label ‖ seq ‖ nonce)", () => {
    // Checked with node's own HMAC, independently of the channel's code: the TD's first chunk
    // opens under the key computed here.
    const key = createSessionKeyPair();
    const channel = channelTo(key);
    seal(channel);
    const request = seal(channel);
    const { sealer } = open(key, request.envelope);
    const answer = JSON.parse(
      sealer.answer({ status: 200, content_type: "a/b" }, Buffer.alloc(0)).toString(),
    ) as { response_nonce: string; chunks: string[] };
    const context = (
      channel as unknown as { context: { export(c: Uint8Array, l: number): Buffer } }
    ).context;
    const secret = context.export(Buffer.from(SEALED_ANSWER_EXPORT_LABEL), 32);
    const info = Buffer.concat([
      Buffer.from("zml-sealed/2 answer keys"),
      Buffer.from("0000000000000001", "hex"),
      Buffer.from(answer.response_nonce, "base64url"),
    ]);
    // HKDF-Expand to 44 bytes: T(1) ‖ T(2), without an Extract (the secret is a PRK).
    const t1 = createHmac("sha256", secret).update(info).update(Buffer.of(1)).digest();
    const t2 = createHmac("sha256", secret).update(t1).update(info).update(Buffer.of(2)).digest();
    const okm = Buffer.concat([t1, t2]);
    const sealedHead = Buffer.from(answer.chunks[0]!, "base64url");
    const d = createDecipheriv("chacha20-poly1305", okm.subarray(0, 32), okm.subarray(32, 44), {
      authTagLength: 16,
    });
    d.setAAD(Buffer.from("final"), { plaintextLength: sealedHead.length - 16 });
    d.setAuthTag(sealedHead.subarray(-16));
    const head = Buffer.concat([d.update(sealedHead.subarray(0, -16)), d.final()]);
    expect(JSON.parse(head.toString())).toEqual({ status: 200, content_type: "a/b" });
    expect(SEALED_CHANNEL_INFO).toBe("zml-sealed/2 channel");
  });
});

describe("a request is refused", () => {
  it.each([
    ["model", { model: "m2" }],
    ["session_id", { session_id: `ses-${"cd".repeat(16)}` }],
    ["stream", { stream: true }],
    ["seq", { seq: 8 }],
  ] as const)("when its clear %s was changed", (_field, change) => {
    const key = createSessionKeyPair();
    const { envelope } = seal(channelTo(key), { seq: 7 });
    const changed: SealedRequestEnvelope = { ...envelope, ...change };
    expect(refusalOf(() => open(key, changed))).toMatchObject({
      code: "sealed_request_rejected",
      param: "ciphertext",
    });
  });

  it("when its key id, suite or enc was relabelled", () => {
    const key = createSessionKeyPair();
    const channel = channelTo(key);
    const { envelope } = seal(channel);
    const td = new RecipientChannel(key, envelope.suite, envelope.enc);
    expect(refusalOf(() => td.open({ ...envelope, key_id: "00".repeat(32) }, PATH)).code).toBe(
      "sealed_request_rejected",
    );
    expect(
      refusalOf(() => td.open({ ...envelope, suite: "x25519-sha256-aes128gcm" }, PATH)).param,
    ).toBe("suite");
    // Under another channel's enc the request does not open either.
    const other = seal(channelTo(key)).envelope.enc;
    expect(refusalOf(() => open(key, { ...envelope, enc: other })).code).toBe(
      "sealed_request_rejected",
    );
    // An enc that is not a usable X25519 key: no channel at all.
    expect(
      refusalOf(
        () => new RecipientChannel(key, envelope.suite, Buffer.alloc(32).toString("base64url")),
      ),
    ).toMatchObject({ code: "sealed_request_rejected", param: "enc" });
  });

  it("when sent to another path, altered, or opened with another key", () => {
    const key = createSessionKeyPair();
    const other = createSessionKeyPair();
    const { envelope } = seal(channelTo(key));
    refusalOf(() => open(key, envelope, "/v1/completions"));
    const bytes = Buffer.from(envelope.ciphertext, "base64url");
    bytes[bytes.length - 20]! ^= 0x40;
    const altered = { ...envelope, ciphertext: bytes.toString("base64url") };
    expect(refusalOf(() => open(key, altered)).code).toBe("sealed_request_rejected");
    expect(refusalOf(() => open(other, envelope)).code).toBe("sealed_request_rejected");
    const mangled = { ...envelope, enc: `${envelope.enc.slice(0, -1)}*` };
    expect(refusalOf(() => open(key, mangled)).code).toBe("sealed_request_invalid");
  });

  it("at any number but its own: a request moved to another position does not open", () => {
    const key = createSessionKeyPair();
    const channel = channelTo(key);
    const requests = [0, 1, 2].map(() => seal(channel).envelope);
    const td = new RecipientChannel(key, requests[0]!.suite, requests[0]!.enc);
    // Request 2 relabelled as 0 or 1, or 0 as 2: refused, whichever arrives first.
    for (const [from, to] of [
      [2, 0],
      [2, 1],
      [0, 2],
    ] as const) {
      expect(refusalOf(() => td.open({ ...requests[from]!, seq: to }, PATH)).code).toBe(
        "sealed_request_rejected",
      );
    }
    // In any order under their own numbers, they open.
    for (const i of [2, 0, 1]) expect(td.open(requests[i]!, PATH).body.equals(body())).toBe(true);
  });

  it("binds exactly the AAD the format names", () => {
    expect(
      sealedRequestAad({
        path: PATH,
        model: "m1",
        session_id: SESSION,
        stream: true,
        seq: 12,
        suite: "x25519-sha256-aes128gcm",
        key_id: "ff".repeat(32),
      }),
    ).toBe(
      `zml-sealed/2\n${PATH}\nm1\n${SESSION}\n1\n12\nx25519-sha256-aes128gcm\n${"ff".repeat(32)}`,
    );
    expect(SEALED_AAD_PREFIX).toBe("zml-sealed/2");
  });
});

describe("a channel never seals a number twice", () => {
  it("refuses a seq at or below one it sealed", () => {
    const channel = channelTo(createSessionKeyPair());
    seal(channel, { seq: 5 });
    for (const seq of [5, 4, 0, -1, 1.5, 2 ** 53]) {
      expect(() => seal(channel, { seq })).toThrow(RangeError);
    }
    expect(seal(channel).envelope.seq).toBe(6);
  });
});

describe("an answer is refused", () => {
  function exchange(stream = false) {
    const key = createSessionKeyPair();
    const channel = channelTo(key);
    const request = seal(channel, { stream });
    const { sealer } = open(key, request.envelope);
    return { key, channel, request, sealer };
  }
  const head = { status: 200, content_type: "application/json" };

  it("when it answers another request, or is not sealed at all", () => {
    const a = exchange();
    const b = exchange();
    const answerForB = b.sealer.answer(head, Buffer.from("{}"));
    expect(refusalOf(() => a.request.opener.openAnswer(answerForB)).code).toBe(
      "sealed_response_invalid",
    );
    expect(() => a.request.opener.openAnswer(Buffer.from('{"choices":[]}'))).toThrow(
      SealedChannelError,
    );
    expect(() => a.request.opener.openAnswer(Buffer.from("<html>"))).toThrow(SealedChannelError);
  });

  it("when it answers another request of the same channel, whole or spliced", () => {
    const { key, channel } = exchange();
    const td = new RecipientChannel(key, "x25519-sha256-chacha20poly1305", channel.enc);
    const one = seal(channel);
    const two = seal(channel);
    const answerOne = JSON.parse(
      td.open(one.envelope, PATH).sealer.answer(head, Buffer.from('{"a":1}')).toString(),
    ) as { response_nonce: string; chunks: string[] };
    const answerTwo = JSON.parse(
      td.open(two.envelope, PATH).sealer.answer(head, Buffer.from('{"a":2}')).toString(),
    ) as { response_nonce: string; chunks: string[] };
    const json = (a: object) => Buffer.from(JSON.stringify(a));
    expect(two.opener.openAnswer(json(answerTwo)).body.toString()).toBe('{"a":2}');
    // Swapped whole: each opener refuses the other's answer.
    expect(() => one.opener.openAnswer(json(answerTwo))).toThrow(SealedChannelError);
    expect(() => two.opener.openAnswer(json(answerOne))).toThrow(SealedChannelError);
    // Spliced: answer two's head with answer one's body, under either response nonce.
    for (const nonce of [answerOne.response_nonce, answerTwo.response_nonce]) {
      const spliced = {
        ...answerTwo,
        response_nonce: nonce,
        chunks: [answerTwo.chunks[0], answerOne.chunks[1]],
      };
      expect(() => two.opener.openAnswer(json(spliced))).toThrow(SealedChannelError);
    }
  });

  it("when a chunk is dropped, swapped or flipped", () => {
    const { request, sealer } = exchange();
    const answer = JSON.parse(sealer.answer(head, Buffer.from('{"a":1}')).toString()) as {
      chunks: string[];
    };
    const variant = (chunks: string[]) => Buffer.from(JSON.stringify({ ...answer, chunks }));
    const [first, second] = answer.chunks as [string, string];
    expect(request.opener.openAnswer(variant([first, second])).body.toString()).toBe('{"a":1}');
    for (const chunks of [
      [first],
      [second, first],
      [first, second.replace(/^./, (c) => (c === "A" ? "B" : "A"))],
    ]) {
      expect(() => request.opener.openAnswer(variant(chunks))).toThrow(SealedChannelError);
    }
  });

  it("when a stream is cut, reordered, or its final mark is moved", () => {
    const { request, sealer } = exchange(true);
    const start = sealer.streamHead({ status: 200, content_type: "text/event-stream" }).toString();
    const e1 = sealer.streamEvent(Buffer.from("data: 1\n\n")).toString();
    const e2 = sealer.streamEvent(Buffer.from("data: 2\n\n")).toString();
    const end = sealer.streamEnd().toString();
    const read = (wire: string) => {
      const reader = request.opener.streamReader();
      const parts = reader.push(Buffer.from(wire));
      reader.finish();
      return parts;
    };
    expect(read(start + e1 + e2 + end)).toHaveLength(4);
    // Cut before the final chunk: every event opened, but the stream is not complete.
    expect(refusalOf(() => read(start + e1 + e2)).message).toMatch(/before its final chunk/);
    expect(() => read(start + e2 + e1 + end)).toThrow(SealedChannelError);
    expect(() => read(start + e1 + end)).toThrow(SealedChannelError);
    // The gateway's clear hint cannot end the stream early or hide its end.
    expect(() => read(start + e1.replace("data:", "event: final\ndata:") + e2 + end)).toThrow();
    expect(() => read(start + e1 + e2 + end.replace("event: final\n", ""))).toThrow();
    expect(() => read(start + e1 + e2 + end + e1)).toThrow(/after the final chunk/);
  });

  it("when a chunk is moved between two streamed answers of one channel", () => {
    const { key, channel } = exchange(true);
    const td = new RecipientChannel(key, "x25519-sha256-chacha20poly1305", channel.enc);
    const streams = [seal(channel, { stream: true }), seal(channel, { stream: true })].map((r) => {
      const sealer = td.open(r.envelope, PATH).sealer;
      return {
        opener: r.opener,
        start: sealer.streamHead({ status: 200, content_type: "text/event-stream" }).toString(),
        event: sealer.streamEvent(Buffer.from(`data: ${r.envelope.seq}\n\n`)).toString(),
        end: sealer.streamEnd().toString(),
      };
    });
    const [a, b] = streams as [(typeof streams)[0], (typeof streams)[0]];
    const read = (opener: typeof a.opener, wire: string) => {
      const reader = opener.streamReader();
      const parts = reader.push(Buffer.from(wire));
      reader.finish();
      return parts;
    };
    expect(read(a.opener, a.start + a.event + a.end)).toHaveLength(3);
    expect(read(b.opener, b.start + b.event + b.end)).toHaveLength(3);
    // b's event at the same position in a, b's final chunk ending a, b's head starting a.
    expect(() => read(a.opener, a.start + b.event + a.end)).toThrow(/chunk 1 of the stream/);
    expect(() => read(a.opener, a.start + a.event + b.end)).toThrow(/chunk 2 of the stream/);
    expect(() => read(a.opener, b.start + a.event + a.end)).toThrow(SealedChannelError);
  });

  it("passes an error event the gateway wrote in clear through as such", () => {
    const { request, sealer } = exchange(true);
    const reader = request.opener.streamReader();
    const parts = reader.push(
      Buffer.concat([
        sealer.streamHead({ status: 200, content_type: "text/event-stream" }),
        Buffer.from('event: error\ndata: {"error":{"code":"stream_interrupted"}}\n\n'),
      ]),
    );
    expect(parts[1]).toEqual({
      kind: "gateway_error",
      data: '{"error":{"code":"stream_interrupted"}}',
    });
    expect(reader.complete).toBe(false);
  });
});

describe("response nonces", () => {
  it("are 32 random bytes, never the same twice, and stay as given across refills of the pool", () => {
    const first = newResponseNonce();
    const kept = Buffer.from(first);
    const seen = new Set<string>([first.toString("hex")]);
    // Over 1 000 nonces: the read-ahead pool (256 at a time) is refilled several times.
    for (let i = 0; i < 1_000; i++) {
      const nonce = newResponseNonce();
      expect(nonce).toHaveLength(32);
      seen.add(nonce.toString("hex"));
    }
    expect(seen.size).toBe(1_001);
    expect(first).toEqual(kept);
  });
});
