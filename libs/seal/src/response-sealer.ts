// The TD's side of an answer: the head (its server's status and type), then the body, sealed
// chunk by chunk under the answer's own keys; framed as JSON for a whole answer or as
// server-sent events for a stream, each event one buffer.
import { SEALED_FINAL_EVENT, SEALED_VERSION } from "@zml/contracts/sealed";
import type { SealedResponseEnvelope, SealedResponseHead } from "@zml/contracts/sealed";
import { sseFrame, toBase64url, utf8 } from "./encoding.ts";
import type { AeadKeyMaker, AeadParams, HmacKey } from "./hpke.ts";
import { deriveAnswerKeys, newResponseNonce, sealChunk } from "./response-keys.ts";
import type { AnswerKeys } from "./response-keys.ts";

const NOTHING = new Uint8Array(0);
const DATA = Buffer.from("data: ");
const FINAL_DATA = Buffer.from(`event: ${SEALED_FINAL_EVENT}\ndata: `);

export class ResponseSealer {
  readonly responseNonce: Buffer;
  private readonly keys: AnswerKeys;
  private next = 0;
  private ended = false;

  /**
   * The sealer of the answer to request `seq` of a channel whose answer secret this is, its
   * AEAD key made by `makeKey`.
   */
  constructor(aead: AeadParams, answerSecret: HmacKey, seq: number, makeKey?: AeadKeyMaker) {
    this.responseNonce = newResponseNonce();
    this.keys = deriveAnswerKeys(aead, answerSecret, seq, this.responseNonce, makeKey);
  }

  /** Seals the next chunk; nothing can follow a final one. */
  seal(plaintext: Uint8Array, final: boolean): Buffer {
    if (this.ended) throw new Error("the answer's final chunk was sealed already");
    this.ended = final;
    return sealChunk(this.keys, this.next++, plaintext, final);
  }

  /** A whole answer, as the JSON body of `SEALED_RESPONSE_MEDIA_TYPE`. */
  answer(head: SealedResponseHead, body: Uint8Array): Buffer {
    const chunks = [this.seal(headBytes(head), body.length === 0)];
    if (body.length > 0) chunks.push(this.seal(body, true));
    const envelope: SealedResponseEnvelope = {
      zml_sealed: SEALED_VERSION,
      response_nonce: toBase64url(this.responseNonce),
      chunks: chunks.map(toBase64url),
    };
    return Buffer.from(JSON.stringify(envelope));
  }

  /** A stream's first event: the response nonce and the sealed head. */
  streamHead(head: SealedResponseHead): Buffer {
    const sealed = this.seal(headBytes(head), false);
    return sseFrame(DATA, Buffer.concat([this.responseNonce, sealed]));
  }

  /** One of the server's events (its bytes, blank line included), as a sealed event. */
  streamEvent(event: Uint8Array): Buffer {
    return sseFrame(DATA, this.seal(event, false));
  }

  /** The stream's last event: an empty chunk sealed as final. */
  streamEnd(): Buffer {
    return sseFrame(FINAL_DATA, this.seal(NOTHING, true));
  }
}

function headBytes(head: SealedResponseHead): Uint8Array {
  return utf8.encode(JSON.stringify({ status: head.status, content_type: head.content_type }));
}
