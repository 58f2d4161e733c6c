// The sealed request: the client seals the whole OpenAI body to the session key (HPKE base
// mode, `info` and AAD per docs/sealed-channel.md); the TD opens it and keeps the context's
// exported secret to seal the answer with.
import {
  DEFAULT_SEALED_SUITE,
  SEALED_REQUEST_INFO,
  SEALED_RESPONSE_EXPORT_LABEL,
  SEALED_VERSION,
  sealedRequestAad,
} from "@zml/contracts/sealed";
import type { SealedRequestEnvelope, SealedSuite } from "@zml/contracts/sealed";
import { fromBase64url, toBase64url, utf8 } from "./encoding.ts";
import { SealedChannelError } from "./errors.ts";
import { ResponseOpener } from "./response-opener.ts";
import { ResponseSealer } from "./response-sealer.ts";
import { sessionPublicKeyOf } from "./session-key.ts";
import { suiteOf } from "./suites.ts";

const INFO = utf8.encode(SEALED_REQUEST_INFO);
const EXPORT_LABEL = utf8.encode(SEALED_RESPONSE_EXPORT_LABEL);
const SECRET_BYTES = 32;

export interface SealRequestInput {
  /** The OpenAI path the request is for, e.g. `/v1/chat/completions`. */
  path: string;
  /** The whole OpenAI body, whose `model` and `stream` equal the clear ones. */
  body: Uint8Array;
  model: string;
  sessionId: string;
  stream: boolean;
  /** This request's number in the session: each one a new one (the TD refuses a replay). */
  seq: number;
  /** The session's `session_public_key` (base64 SPKI DER), after its quote was verified. */
  sessionPublicKey: string;
  suite?: SealedSuite;
  policy?: string;
  maxTokens?: number;
}

export interface SealedRequest {
  envelope: SealedRequestEnvelope;
  /** The envelope as the JSON bytes to send. */
  bytes: Uint8Array;
  /** Opens this request's answer, and only this one's. */
  opener: ResponseOpener;
}

/** Seals a request to a session's key. */
export async function sealRequest(input: SealRequestInput): Promise<SealedRequest> {
  const suite = suiteOf(input.suite ?? DEFAULT_SEALED_SUITE);
  const key = sessionPublicKeyOf(input.sessionPublicKey);
  const recipientPublicKey = await suite.hpke.kem.deserializePublicKey(key.raw);
  const sender = await suite.hpke.createSenderContext({ recipientPublicKey, info: INFO });
  const aad = sealedRequestAad({
    path: input.path,
    model: input.model,
    session_id: input.sessionId,
    stream: input.stream,
    seq: input.seq,
    suite: suite.name,
    key_id: key.keyId,
  });
  const ciphertext = new Uint8Array(await sender.seal(input.body, utf8.encode(aad)));
  const enc = new Uint8Array(sender.enc);
  const secret = new Uint8Array(await sender.export(EXPORT_LABEL, SECRET_BYTES));
  const envelope: SealedRequestEnvelope = {
    zml_sealed: SEALED_VERSION,
    model: input.model,
    session_id: input.sessionId,
    tier: 4,
    ...(input.policy === undefined ? {} : { policy: input.policy }),
    stream: input.stream,
    ...(input.maxTokens === undefined ? {} : { max_tokens: input.maxTokens }),
    suite: suite.name,
    key_id: key.keyId,
    seq: input.seq,
    enc: toBase64url(enc),
    ciphertext: toBase64url(ciphertext),
  };
  return {
    envelope,
    bytes: utf8.encode(JSON.stringify(envelope)),
    opener: new ResponseOpener(suite, secret, enc),
  };
}

export interface OpenedRequest {
  /** The client's OpenAI body, as the client sealed it. */
  body: Buffer;
  /** Seals this request's answer. */
  sealer: ResponseSealer;
}

/**
 * Opens a request sealed to `privateKey` for `path` (the path it arrived on: the AAD binds
 * it). The envelope must already be valid (`SealedRequestSchema`) and its `key_id` the
 * key's. Checking `seq` against replays is the caller's: only it knows what it has opened.
 * @throws SealedChannelError `sealed_request_rejected` when it does not open.
 */
export async function openSealedRequest(
  envelope: SealedRequestEnvelope,
  path: string,
  privateKey: CryptoKey,
): Promise<OpenedRequest> {
  const suite = suiteOf(envelope.suite);
  const enc = fromBase64url(envelope.enc, "sealed_request_invalid", "enc");
  const ciphertext = fromBase64url(envelope.ciphertext, "sealed_request_invalid", "ciphertext");
  const aad = sealedRequestAad({ path, ...envelope });
  let body: Buffer;
  let secret: Uint8Array;
  try {
    const recipient = await suite.hpke.createRecipientContext({
      recipientKey: privateKey,
      enc,
      info: INFO,
    });
    body = Buffer.from(await recipient.open(ciphertext, utf8.encode(aad)));
    secret = new Uint8Array(await recipient.export(EXPORT_LABEL, SECRET_BYTES));
  } catch {
    throw new SealedChannelError(
      "sealed_request_rejected",
      "the request does not open with this session's key: altered, or sealed to another key",
      "ciphertext",
    );
  }
  return { body, sealer: new ResponseSealer(suite, secret, enc) };
}
