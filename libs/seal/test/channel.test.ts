// The sealed channel end to end in one process: what a client seals only the session key's
// holder opens, the answer opens only for the request it answers, and every change on the way
// (a flipped bit, a changed clear field, a dropped, reordered or extra chunk) is refused.
import { createDecipheriv, hkdfSync } from "node:crypto";
import { SEALED_REQUEST_INFO, sealedRequestAad } from "@zml/contracts/sealed";
import type { SealedRequestEnvelope } from "@zml/contracts/sealed";
import { describe, expect, it } from "vitest";
import {
  createSessionKeyPair,
  openSealedRequest,
  sealRequest,
  SealedChannelError,
  sessionPublicKeyOf,
} from "../src/index.ts";
import type { SealRequestInput, SessionKeyPair } from "../src/index.ts";

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

async function sealed(key: SessionKeyPair, extra: Partial<SealRequestInput> = {}) {
  return sealRequest({
    path: PATH,
    body: body(extra.stream),
    model: "m1",
    sessionId: SESSION,
    stream: false,
    seq: 7,
    sessionPublicKey: key.publicKeySpki.toString("base64"),
    ...extra,
  });
}

async function refusal(promise: Promise<unknown>): Promise<SealedChannelError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SealedChannelError);
  return error as SealedChannelError;
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
  it("publish SPKI DER whose SHA-256 is the key id", async () => {
    const key = await createSessionKeyPair();
    const pub = sessionPublicKeyOf(key.publicKeySpki.toString("base64"));
    expect(pub.keyId).toBe(key.keyId);
    expect(pub.raw).toHaveLength(32);
    expect(() => sessionPublicKeyOf(Buffer.alloc(44).toString("base64"))).toThrow(TypeError);
  });
});

describe.each(["x25519-sha256-chacha20poly1305", "x25519-sha256-aes128gcm"] as const)(
  "%s",
  (suite) => {
    it("round-trips a request and its whole answer", async () => {
      const key = await createSessionKeyPair();
      const request = await sealed(key, { suite, policy: "p", maxTokens: 9 });
      expect(request.envelope).toMatchObject({
        zml_sealed: 1,
        model: "m1",
        session_id: SESSION,
        tier: 4,
        policy: "p",
        max_tokens: 9,
        stream: false,
        suite,
        key_id: key.keyId,
        seq: 7,
      });
      expect(Buffer.from(request.bytes).includes("secret prompt")).toBe(false);
      const opened = await openSealedRequest(request.envelope, PATH, key.privateKey);
      expect(opened.body.equals(body())).toBe(true);

      const answer = opened.sealer.answer(
        { status: 200, content_type: "application/json" },
        Buffer.from('{"answer":"the secret reply"}'),
      );
      expect(answer.includes("secret reply")).toBe(false);
      expect(request.opener.openAnswer(answer)).toEqual({
        status: 200,
        contentType: "application/json",
        body: Buffer.from('{"answer":"the secret reply"}'),
      });
      // A body-less answer is its head alone, sealed as final.
      const empty = (await openSealedRequest(request.envelope, PATH, key.privateKey)).sealer;
      const headOnly = empty.answer({ status: 204, content_type: "text/plain" }, Buffer.alloc(0));
      expect(JSON.parse(headOnly.toString()).chunks).toHaveLength(1);
    });

    it("round-trips a stream event by event", async () => {
      const key = await createSessionKeyPair();
      const request = await sealed(key, { suite, stream: true });
      const { sealer } = await openSealedRequest(request.envelope, PATH, key.privateKey);
      const events = ['data: {"n":1}\n\n', 'data: {"n":2}\n\n', "data: [DONE]\n\n"];
      const wire =
        sealer.streamHead({ status: 200, content_type: "text/event-stream" }) +
        events.map((e) => sealer.streamEvent(Buffer.from(e))).join("") +
        sealer.streamEnd();
      expect(wire).not.toContain('"n"');
      const reader = request.opener.streamReader();
      // Delivered in odd slices: parts come out whole whatever the cuts.
      const parts = [];
      for (let i = 0; i < wire.length; i += 7)
        parts.push(...reader.push(Buffer.from(wire.slice(i, i + 7))));
      reader.finish();
      expect(parts).toEqual([
        { kind: "head", head: { status: 200, content_type: "text/event-stream" } },
        ...events.map((e) => ({ kind: "event", event: Buffer.from(e) })),
        { kind: "end" },
      ]);
    });
  },
);

describe("the answer's keys", () => {
  it("are HKDF(secret, enc ‖ response_nonce) with the labels key and nonce", async () => {
    // Checked against node's own HKDF (RFC 5869), independently of the channel's code: the
    // TD's first chunk opens under the key computed here.
    const key = await createSessionKeyPair();
    const request = await sealed(key);
    const { sealer } = await openSealedRequest(request.envelope, PATH, key.privateKey);
    const answer = JSON.parse(
      sealer.answer({ status: 200, content_type: "a/b" }, Buffer.alloc(0)).toString(),
    ) as { response_nonce: string; chunks: string[] };
    const opener = request.opener as unknown as { secret: Uint8Array; enc: Uint8Array };
    const salt = Buffer.concat([opener.enc, Buffer.from(answer.response_nonce, "base64url")]);
    const aeadKey = Buffer.from(hkdfSync("sha256", opener.secret, salt, "key", 32));
    const nonce = Buffer.from(hkdfSync("sha256", opener.secret, salt, "nonce", 12));
    const sealedHead = Buffer.from(answer.chunks[0]!, "base64url");
    const d = createDecipheriv("chacha20-poly1305", aeadKey, nonce, { authTagLength: 16 });
    d.setAAD(Buffer.from("final"), { plaintextLength: sealedHead.length - 16 });
    d.setAuthTag(sealedHead.subarray(-16));
    const head = Buffer.concat([d.update(sealedHead.subarray(0, -16)), d.final()]);
    expect(JSON.parse(head.toString())).toEqual({ status: 200, content_type: "a/b" });
  });
});

describe("a request is refused", () => {
  it.each([
    ["model", { model: "m2" }],
    ["session_id", { session_id: `ses-${"cd".repeat(16)}` }],
    ["stream", { stream: true }],
    ["seq", { seq: 8 }],
    ["key_id", { key_id: "00".repeat(32) }],
  ] as const)("when its clear %s was changed", async (_field, change) => {
    const key = await createSessionKeyPair();
    const { envelope } = await sealed(key);
    const changed: SealedRequestEnvelope = { ...envelope, ...change };
    const error = await refusal(openSealedRequest(changed, PATH, key.privateKey));
    expect(error).toMatchObject({ code: "sealed_request_rejected", param: "ciphertext" });
  });

  it("when sent to another path, altered, or opened with another key", async () => {
    const key = await createSessionKeyPair();
    const other = await createSessionKeyPair();
    const { envelope } = await sealed(key);
    await refusal(openSealedRequest(envelope, "/v1/completions", key.privateKey));
    const bytes = Buffer.from(envelope.ciphertext, "base64url");
    bytes[bytes.length - 20]! ^= 0x40;
    const altered = { ...envelope, ciphertext: bytes.toString("base64url") };
    expect((await refusal(openSealedRequest(altered, PATH, key.privateKey))).code).toBe(
      "sealed_request_rejected",
    );
    await refusal(openSealedRequest(envelope, PATH, other.privateKey));
    const mangled = { ...envelope, enc: `${envelope.enc.slice(0, -1)}*` };
    expect((await refusal(openSealedRequest(mangled, PATH, key.privateKey))).code).toBe(
      "sealed_request_invalid",
    );
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
      `zml-sealed/1\n${PATH}\nm1\n${SESSION}\n1\n12\nx25519-sha256-aes128gcm\n${"ff".repeat(32)}`,
    );
    expect(SEALED_REQUEST_INFO).toBe("zml-sealed/1 request");
  });
});

describe("an answer is refused", () => {
  async function exchange(stream = false) {
    const key = await createSessionKeyPair();
    const request = await sealed(key, { stream });
    const { sealer } = await openSealedRequest(request.envelope, PATH, key.privateKey);
    return { key, request, sealer };
  }
  const head = { status: 200, content_type: "application/json" };

  it("when it answers another request, or is not sealed at all", async () => {
    const a = await exchange();
    const b = await exchange();
    const answerForB = b.sealer.answer(head, Buffer.from("{}"));
    expect(refusalOf(() => a.request.opener.openAnswer(answerForB)).code).toBe(
      "sealed_response_invalid",
    );
    expect(() => a.request.opener.openAnswer(Buffer.from('{"choices":[]}'))).toThrow(
      SealedChannelError,
    );
    expect(() => a.request.opener.openAnswer(Buffer.from("<html>"))).toThrow(SealedChannelError);
  });

  it("when a chunk is dropped, swapped or flipped", async () => {
    const { request, sealer } = await exchange();
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

  it("when a stream is cut, reordered, or its final mark is moved", async () => {
    const { request, sealer } = await exchange(true);
    const start = sealer.streamHead({ status: 200, content_type: "text/event-stream" });
    const e1 = sealer.streamEvent(Buffer.from("data: 1\n\n"));
    const e2 = sealer.streamEvent(Buffer.from("data: 2\n\n"));
    const end = sealer.streamEnd();
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

  it("passes an error event the gateway wrote in clear through as such", async () => {
    const { request, sealer } = await exchange(true);
    const reader = request.opener.streamReader();
    const parts = reader.push(
      Buffer.from(
        sealer.streamHead({ status: 200, content_type: "text/event-stream" }) +
          'event: error\ndata: {"error":{"code":"stream_interrupted"}}\n\n',
      ),
    );
    expect(parts[1]).toEqual({
      kind: "gateway_error",
      data: '{"error":{"code":"stream_interrupted"}}',
    });
    expect(reader.complete).toBe(false);
  });
});
