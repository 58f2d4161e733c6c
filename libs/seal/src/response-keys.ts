// An answer's keys: derived from the channel's answer secret, the request's `seq` and the TD's
// random response nonce, as OHTTP derives its response keys (RFC 9458 §4.4); its chunks each
// sealed under their own nonce with the last one marked, as chunked OHTTP does. So a chunk
// opens only in its own answer, at its own position, final or not.
import { randomBytes } from "node:crypto";
import type { KeyObject } from "node:crypto";
import { SEALED_FINAL_CHUNK_AAD, SEALED_RESPONSE_NONCE_BYTES } from "@zml/contracts/sealed";
import { aeadOpen, aeadSeal, computeNonce, hkdfExpand, hkdfExtract, secretKeyOf } from "./hpke.ts";
import type { AeadParams } from "./hpke.ts";

const FINAL_AAD = Buffer.from(SEALED_FINAL_CHUNK_AAD);
const NO_AAD = Buffer.alloc(0);
const KEY_LABEL = Buffer.from("key");
const NONCE_LABEL = Buffer.from("nonce");
/** Chunks one answer may have: the counter fills the nonce's last four bytes at most. */
const MAX_CHUNKS = 2 ** 32;

/** The key (made a KeyObject once, for every chunk) and base nonce of one answer. */
export interface AnswerKeys {
  aead: AeadParams;
  key: KeyObject;
  baseNonce: Buffer;
}

/** `I2OSP(seq, 8)`. */
function seqBytes(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

/**
 * `prk = HKDF-Extract(I2OSP(seq, 8) ‖ response_nonce, answer_secret)`,
 * `key = HKDF-Expand(prk, "key", Nk)`, `base_nonce = HKDF-Expand(prk, "nonce", Nn)`.
 */
export function deriveAnswerKeys(
  aead: AeadParams,
  answerSecret: Uint8Array,
  seq: number,
  responseNonce: Uint8Array,
): AnswerKeys {
  const prk = hkdfExtract(Buffer.concat([seqBytes(seq), responseNonce]), answerSecret);
  return {
    aead,
    key: secretKeyOf(hkdfExpand(prk, KEY_LABEL, aead.keyBytes)),
    baseNonce: hkdfExpand(prk, NONCE_LABEL, aead.nonceBytes),
  };
}

function chunkNonce(keys: AnswerKeys, index: number): Buffer {
  if (!(index >= 0 && index < MAX_CHUNKS)) throw new RangeError("too many chunks in one answer");
  return computeNonce(keys.baseNonce, index);
}

/** Chunk `index` sealed: ciphertext ‖ tag, with AAD "final" for the last chunk, none else. */
export function sealChunk(
  keys: AnswerKeys,
  index: number,
  plaintext: Uint8Array,
  final: boolean,
): Buffer {
  return aeadSeal(
    keys.aead,
    keys.key,
    chunkNonce(keys, index),
    final ? FINAL_AAD : NO_AAD,
    plaintext,
  );
}

/** The chunk's plaintext, or undefined when it does not open as chunk `index` (final or not). */
export function openChunk(
  keys: AnswerKeys,
  index: number,
  sealed: Uint8Array,
  final: boolean,
): Buffer | undefined {
  return aeadOpen(keys.aead, keys.key, chunkNonce(keys, index), final ? FINAL_AAD : NO_AAD, sealed);
}

/** A fresh response nonce. */
export function newResponseNonce(): Buffer {
  return randomBytes(SEALED_RESPONSE_NONCE_BYTES);
}
