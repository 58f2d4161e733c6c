// The sealed channel (docs/sealed-channel.md): one HPKE setup per client session to the
// session's key, whose `enc` every request carries; each request is the context's message at
// its own `seq`, and each answer is sealed under keys derived from the context's exported
// answer secret and that `seq`. The client side seals with `SealedChannel`; the TD opens with
// the `RecipientChannel` it made from the first request that opened under that `enc`.
import type { KeyObject } from "node:crypto";
import {
  DEFAULT_SEALED_SUITE,
  SEALED_ANSWER_EXPORT_LABEL,
  SEALED_CHANNEL_INFO,
  SEALED_MAX_SEQ,
  SEALED_VERSION,
  sealedRequestAad,
} from "@zml/contracts/sealed";
import type { SealedRequestEnvelope, SealedSuite } from "@zml/contracts/sealed";
import { fromBase64url, toBase64url, utf8 } from "./encoding.ts";
import { SealedChannelError } from "./errors.ts";
import { HmacKey, HpkeError, NH, setupBaseR, setupBaseS } from "./hpke.ts";
import type { AeadKeyMaker, HpkeContext } from "./hpke.ts";
import { ResponseOpener } from "./response-opener.ts";
import { ResponseSealer } from "./response-sealer.ts";
import { sessionPublicKeyOf } from "./session-key.ts";
import type { SessionKeyPair } from "./session-key.ts";
import { suiteOf } from "./suites.ts";
import type { SuiteParams } from "./suites.ts";

const INFO = utf8.encode(SEALED_CHANNEL_INFO);
const ANSWER_LABEL = utf8.encode(SEALED_ANSWER_EXPORT_LABEL);

export interface OpenChannelInput {
  sessionId: string;
  /** The session's `session_public_key` (base64 SPKI DER), after its quote was verified. */
  sessionPublicKey: string;
  suite?: SealedSuite;
  /** Fixes HPKE's ephemeral key: tests only. */
  ephemeral?: KeyObject;
}

export interface SealInput {
  /** The OpenAI path the request is for, e.g. `/v1/chat/completions`. */
  path: string;
  /** The whole OpenAI body, whose `model` and `stream` equal the clear ones. */
  body: Uint8Array;
  model: string;
  stream: boolean;
  /**
   * This request's number in the channel; default the channel's next one. Each number is
   * sealed at most once, and only above every number sealed before (its nonce is the number).
   */
  seq?: number;
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

/** The client's side of a channel: one HPKE setup, then every request sealed synchronously. */
export class SealedChannel {
  readonly sessionId: string;
  readonly keyId: string;
  readonly suite: SuiteParams;
  /** base64url of the channel's `enc`, as every envelope carries it. */
  readonly enc: string;
  private readonly context: HpkeContext;
  private readonly answerSecret: HmacKey;
  private nextSeq = 0;

  /** Sets up a channel to a session's key (one X25519 key pair and agreement). */
  constructor(input: OpenChannelInput) {
    this.suite = suiteOf(input.suite ?? DEFAULT_SEALED_SUITE);
    const key = sessionPublicKeyOf(input.sessionPublicKey);
    const { enc, context } = setupBaseS(this.suite.aead, key.raw, INFO, input.ephemeral);
    this.sessionId = input.sessionId;
    this.keyId = key.keyId;
    this.enc = toBase64url(enc);
    this.context = context;
    this.answerSecret = new HmacKey(context.export(ANSWER_LABEL, NH));
  }

  /**
   * Seals one request. @throws RangeError for a `seq` not above every one sealed before
   * (sealing a number twice would reuse its nonce).
   */
  seal(input: SealInput): SealedRequest {
    const seq = input.seq ?? this.nextSeq;
    if (!(Number.isSafeInteger(seq) && seq >= this.nextSeq && seq <= SEALED_MAX_SEQ)) {
      throw new RangeError(`seq ${seq}: this channel has sealed up to ${this.nextSeq - 1}`);
    }
    this.nextSeq = seq + 1;
    const aad = sealedRequestAad({
      path: input.path,
      model: input.model,
      session_id: this.sessionId,
      stream: input.stream,
      seq,
      suite: this.suite.name,
      key_id: this.keyId,
    });
    const ciphertext = this.context.seal(seq, utf8.encode(aad), input.body);
    const envelope: SealedRequestEnvelope = {
      zml_sealed: SEALED_VERSION,
      model: input.model,
      session_id: this.sessionId,
      tier: 4,
      ...(input.policy === undefined ? {} : { policy: input.policy }),
      stream: input.stream,
      ...(input.maxTokens === undefined ? {} : { max_tokens: input.maxTokens }),
      suite: this.suite.name,
      key_id: this.keyId,
      seq,
      enc: this.enc,
      ciphertext: toBase64url(ciphertext),
    };
    return {
      envelope,
      bytes: utf8.encode(JSON.stringify(envelope)),
      opener: new ResponseOpener(this.suite.aead, this.answerSecret, seq),
    };
  }
}

export interface OpenedRequest {
  /** The client's OpenAI body, as the client sealed it. */
  body: Buffer;
  /** Seals this request's answer. */
  sealer: ResponseSealer;
}

function rejected(message: string, param: string): SealedChannelError {
  return new SealedChannelError("sealed_request_rejected", message, param);
}

/** The TD's side of a channel: the recipient context for one `enc` under one session key. */
export class RecipientChannel {
  readonly suite: SuiteParams;
  readonly enc: string;
  private readonly keyId: string;
  private readonly context: HpkeContext;
  private readonly answerSecret: HmacKey;
  private readonly makeKey: AeadKeyMaker | undefined;

  /**
   * The channel `enc` (base64url) sets up under `pair` (one X25519 agreement). Keep it only
   * once a request has opened under it. Its AEAD keys are made by `makeKey` (default
   * node:crypto's).
   * @throws SealedChannelError `sealed_request_invalid` for an `enc` that is not base64url,
   *   `sealed_request_rejected` for one that is not a usable X25519 key.
   */
  constructor(pair: SessionKeyPair, suite: SealedSuite, enc: string, makeKey?: AeadKeyMaker) {
    this.suite = suiteOf(suite);
    this.enc = enc;
    this.keyId = pair.keyId;
    this.makeKey = makeKey;
    const encBytes = fromBase64url(enc, "sealed_request_invalid", "enc");
    try {
      this.context = setupBaseR(
        this.suite.aead,
        encBytes,
        pair.privateKey,
        pair.publicKeyRaw,
        INFO,
        makeKey,
      );
    } catch (error) {
      if (error instanceof HpkeError) throw rejected(`enc: ${error.message}`, "enc");
      throw error;
    }
    this.answerSecret = new HmacKey(this.context.export(ANSWER_LABEL, NH));
  }

  /**
   * Opens a request of this channel that arrived on `path` (the AAD binds it). The envelope
   * must already be valid (`SealedRequestSchema`). Checking `seq` against replays is the
   * caller's: only it knows what it has opened.
   * @throws SealedChannelError `sealed_request_rejected` when it does not open.
   */
  open(envelope: SealedRequestEnvelope, path: string): OpenedRequest {
    if (envelope.enc !== this.enc || envelope.key_id !== this.keyId) {
      throw rejected("the request is not of this channel", "enc");
    }
    if (envelope.suite !== this.suite.name) {
      throw rejected("the request names another suite than its channel's", "suite");
    }
    const ciphertext = fromBase64url(envelope.ciphertext, "sealed_request_invalid", "ciphertext");
    const aad = sealedRequestAad({ path, ...envelope });
    const body = this.context.open(envelope.seq, utf8.encode(aad), ciphertext);
    if (body === undefined) {
      throw rejected(
        "the request does not open in its channel: altered, relabelled, or sealed to another key",
        "ciphertext",
      );
    }
    return {
      body,
      sealer: new ResponseSealer(this.suite.aead, this.answerSecret, envelope.seq, this.makeKey),
    };
  }
}
