// The TD's side of an answer: the head (its server's status and type), then the body, sealed
// chunk by chunk; framed as JSON for a whole answer or as server-sent events for a stream.
import { SEALED_FINAL_EVENT, SEALED_VERSION } from "@zml/contracts/sealed";
import type { SealedResponseEnvelope, SealedResponseHead } from "@zml/contracts/sealed";
import { toBase64url, utf8 } from "./encoding.ts";
import { deriveResponseKeys, newResponseNonce, sealChunk } from "./response-keys.ts";
import type { ResponseKeys } from "./response-keys.ts";
import type { SuiteParams } from "./suites.ts";

const NOTHING = new Uint8Array(0);

export class ResponseSealer {
  readonly responseNonce: Buffer;
  private readonly keys: ResponseKeys;
  private next = 0;
  private ended = false;

  constructor(suite: SuiteParams, secret: Uint8Array, enc: Uint8Array) {
    this.responseNonce = newResponseNonce();
    this.keys = deriveResponseKeys(suite, secret, enc, this.responseNonce);
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
  streamHead(head: SealedResponseHead): string {
    const sealed = this.seal(headBytes(head), false);
    return `data: ${toBase64url(Buffer.concat([this.responseNonce, sealed]))}\n\n`;
  }

  /** One of the server's events (its bytes, blank line included), as a sealed event. */
  streamEvent(event: Uint8Array): string {
    return `data: ${toBase64url(this.seal(event, false))}\n\n`;
  }

  /** The stream's last event: an empty chunk sealed as final. */
  streamEnd(): string {
    return `event: ${SEALED_FINAL_EVENT}\ndata: ${toBase64url(this.seal(NOTHING, true))}\n\n`;
  }
}

function headBytes(head: SealedResponseHead): Uint8Array {
  return utf8.encode(JSON.stringify({ status: head.status, content_type: head.content_type }));
}
