// The client's side of an answer: opens a whole sealed answer, or a sealed stream event by
// event, and refuses anything that does not open, arrives after the end, or stops before it.
import {
  SEALED_FINAL_EVENT,
  SEALED_RESPONSE_NONCE_BYTES,
  SEALED_VERSION,
} from "@zml/contracts/sealed";
import type { SealedResponseHead } from "@zml/contracts/sealed";
import { fromBase64url } from "./encoding.ts";
import { SealedChannelError } from "./errors.ts";
import type { AeadParams, HmacKey } from "./hpke.ts";
import { deriveAnswerKeys, openChunk } from "./response-keys.ts";
import type { AnswerKeys } from "./response-keys.ts";

/** A whole answer, opened. */
export interface OpenedAnswer {
  /** The TD's server's status and type, as the TD sealed them. */
  status: number;
  contentType: string;
  body: Buffer;
}

/** What a sealed stream yields, in order. */
export type StreamPart =
  | { kind: "head"; head: SealedResponseHead }
  /** One of the server's events, opened (its bytes, blank line included). */
  | { kind: "event"; event: Buffer }
  /** The final chunk: the stream is complete. */
  | { kind: "end" }
  /** An error event the gateway wrote in clear (its `data`, an OpenAI error body). */
  | { kind: "gateway_error"; data: string };

function invalid(message: string): SealedChannelError {
  return new SealedChannelError("sealed_response_invalid", message);
}

function decode(text: unknown, what: string): Buffer {
  if (typeof text !== "string") throw invalid(`${what} is missing`);
  try {
    return fromBase64url(text, "sealed_response_invalid", what);
  } catch {
    throw invalid(`${what} is not base64url`);
  }
}

function readHead(bytes: Buffer): SealedResponseHead {
  let head: unknown;
  try {
    head = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw invalid("the answer's head is not JSON");
  }
  const h = head as Partial<SealedResponseHead> | null;
  if (
    typeof h !== "object" ||
    h === null ||
    !Number.isInteger(h.status) ||
    typeof h.content_type !== "string"
  ) {
    throw invalid("the answer's head has no status and content type");
  }
  return { status: h.status!, content_type: h.content_type };
}

/** Opens the answer to one request of a channel, and only that one's (its `seq`'s). */
export class ResponseOpener {
  private readonly aead: AeadParams;
  private readonly answerSecret: HmacKey;
  /** The request this opener answers. */
  readonly seq: number;

  constructor(aead: AeadParams, answerSecret: HmacKey, seq: number) {
    this.aead = aead;
    this.answerSecret = answerSecret;
    this.seq = seq;
  }

  private keys(responseNonce: Buffer): AnswerKeys {
    if (responseNonce.length !== SEALED_RESPONSE_NONCE_BYTES) {
      throw invalid("the answer's response nonce is not 32 bytes");
    }
    return deriveAnswerKeys(this.aead, this.answerSecret, this.seq, responseNonce);
  }

  /**
   * Opens a whole answer (the JSON of `SEALED_RESPONSE_MEDIA_TYPE`).
   * @throws SealedChannelError `sealed_response_invalid`
   */
  openAnswer(bytes: Uint8Array): OpenedAnswer {
    let envelope: { zml_sealed?: unknown; response_nonce?: unknown; chunks?: unknown };
    try {
      envelope = JSON.parse(Buffer.from(bytes).toString("utf8")) as typeof envelope;
    } catch {
      throw invalid("the answer is not a sealed answer");
    }
    if (envelope?.zml_sealed !== SEALED_VERSION || !Array.isArray(envelope.chunks)) {
      throw invalid("the answer is not a sealed answer");
    }
    const keys = this.keys(decode(envelope.response_nonce, "response_nonce"));
    const chunks = envelope.chunks as unknown[];
    if (chunks.length < 1 || chunks.length > 2) throw invalid("a sealed answer has 1 or 2 chunks");
    const opened = chunks.map((chunk, i) => {
      const plain = openChunk(keys, i, decode(chunk, `chunks.${i}`), i === chunks.length - 1);
      if (plain === undefined) throw invalid(`chunk ${i} of the answer does not open`);
      return plain;
    });
    const head = readHead(opened[0]!);
    return {
      status: head.status,
      contentType: head.content_type,
      body: opened[1] ?? Buffer.alloc(0),
    };
  }

  /** A reader for this request's sealed stream. */
  streamReader(): SealedStreamReader {
    return new SealedStreamReader((nonce) => this.keys(nonce));
  }
}

/**
 * Reads a sealed stream as its bytes arrive: `push` returns the parts that became complete.
 * Each event must open as the next chunk; the stream is complete only at the chunk sealed as
 * final (the clear `event: final` is only the gateway's hint).
 */
export class SealedStreamReader {
  private text = "";
  private readonly decoder = new TextDecoder();
  private keys: AnswerKeys | undefined;
  private next = 0;
  private ended = false;

  private readonly keysFor: (responseNonce: Buffer) => AnswerKeys;

  constructor(keysFor: (responseNonce: Buffer) => AnswerKeys) {
    this.keysFor = keysFor;
  }

  push(bytes: Uint8Array): StreamPart[] {
    this.text += this.decoder.decode(bytes, { stream: true });
    const parts: StreamPart[] = [];
    for (;;) {
      const boundary = /\r?\n\r?\n/.exec(this.text);
      if (boundary === null) break;
      const block = this.text.slice(0, boundary.index);
      this.text = this.text.slice(boundary.index + boundary[0].length);
      const part = this.event(block);
      if (part !== undefined) parts.push(part);
    }
    return parts;
  }

  /** Call when the bytes end. @throws SealedChannelError when the stream was cut short. */
  finish(): void {
    if (!this.ended) throw invalid("the sealed stream ended before its final chunk");
  }

  /** Whether the final chunk has been read. */
  get complete(): boolean {
    return this.ended;
  }

  private event(block: string): StreamPart | undefined {
    let name = "message";
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    if (data.length === 0) return undefined;
    if (name === "error") return { kind: "gateway_error", data: data.join("\n") };
    if (this.ended) throw invalid("an event arrived after the final chunk");
    let sealed = decode(data.join(""), "event data");
    if (this.keys === undefined) {
      this.keys = this.keysFor(sealed.subarray(0, SEALED_RESPONSE_NONCE_BYTES));
      sealed = sealed.subarray(SEALED_RESPONSE_NONCE_BYTES);
    }
    const final = name === SEALED_FINAL_EVENT;
    const index = this.next++;
    const plain = openChunk(this.keys, index, sealed, final);
    if (plain === undefined) throw invalid(`chunk ${index} of the stream does not open`);
    if (index === 0) {
      if (final) throw invalid("the stream ended at its head");
      return { kind: "head", head: readHead(plain) };
    }
    if (final) {
      if (plain.length > 0) throw invalid("the stream's final chunk is not empty");
      this.ended = true;
      return { kind: "end" };
    }
    return { kind: "event", event: plain };
  }
}
