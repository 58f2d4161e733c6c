// An answer's keys: derived from the channel's answer secret, the request's `seq` and the TD's
// random response nonce, as OHTTP derives its response keys from a response nonce (RFC 9458
// §4.4); its chunks each
// sealed under their own nonce with the last one marked, as chunked OHTTP does. So a chunk
// opens only in its own answer, at its own position, final or not.
import { randomFillSync } from "node:crypto";
import {
  SEALED_ANSWER_KEYS_LABEL,
  SEALED_FINAL_CHUNK_AAD,
  SEALED_RESPONSE_NONCE_BYTES,
} from "@zml/contracts/sealed";
import { computeNonce, hkdfExpand, nodeAeadKey } from "./hpke.ts";
import type { AeadKey, AeadKeyMaker, AeadParams, HmacKey } from "./hpke.ts";

const FINAL_AAD = Buffer.from(SEALED_FINAL_CHUNK_AAD);
const NO_AAD = Buffer.alloc(0);
const KEYS_LABEL = Buffer.from(SEALED_ANSWER_KEYS_LABEL);
/** Chunks one answer may have: the counter fills the nonce's last four bytes at most. */
const MAX_CHUNKS = 2 ** 32;

/** The key (made once, for every chunk) and base nonce of one answer. */
export interface AnswerKeys {
  key: AeadKey;
  baseNonce: Buffer;
}

/** `I2OSP(seq, 8)`. */
function seqBytes(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

/**
 * `okm = HKDF-Expand(answer_secret, "zml-sealed/2 answer keys" ‖ I2OSP(seq, 8) ‖
 * response_nonce, Nk + Nn)`, `key = okm[0, Nk)`, `base_nonce = okm[Nk, Nk + Nn)`. The answer
 * secret is HPKE's exporter output, already a pseudorandom key, so no Extract comes first
 * (RFC 5869 §3.3); it is given as an `HmacKey` the channel made once.
 */
export function deriveAnswerKeys(
  aead: AeadParams,
  answerSecret: HmacKey,
  seq: number,
  responseNonce: Uint8Array,
  makeKey: AeadKeyMaker = nodeAeadKey,
): AnswerKeys {
  const info = Buffer.concat([KEYS_LABEL, seqBytes(seq), responseNonce]);
  const okm = hkdfExpand(answerSecret, info, aead.keyBytes + aead.nonceBytes);
  return {
    key: makeKey(aead, okm.subarray(0, aead.keyBytes)),
    baseNonce: okm.subarray(aead.keyBytes),
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
  return keys.key.seal(chunkNonce(keys, index), final ? FINAL_AAD : NO_AAD, plaintext);
}

/** The chunk's plaintext, or undefined when it does not open as chunk `index` (final or not). */
export function openChunk(
  keys: AnswerKeys,
  index: number,
  sealed: Uint8Array,
  final: boolean,
): Buffer | undefined {
  return keys.key.open(chunkNonce(keys, index), final ? FINAL_AAD : NO_AAD, sealed);
}

/**
 * Response nonces are drawn from random bytes read ahead, 256 nonces at a time: one call to the
 * CSPRNG costs about as much for 8 KiB as for 32 bytes, and a TD makes one nonce per answer. A
 * nonce is public (it travels in clear with its answer), so holding the next ones is no secret.
 */
const NONCES_AHEAD = 256;
const noncePool = Buffer.alloc(NONCES_AHEAD * SEALED_RESPONSE_NONCE_BYTES);
let nextNonce = NONCES_AHEAD;

/** A fresh response nonce: random, never handed out twice. */
export function newResponseNonce(): Buffer {
  if (nextNonce === NONCES_AHEAD) {
    randomFillSync(noncePool);
    nextNonce = 0;
  }
  const start = nextNonce++ * SEALED_RESPONSE_NONCE_BYTES;
  // A copy: the pool's bytes are overwritten when it is refilled.
  return Buffer.from(noncePool.subarray(start, start + SEALED_RESPONSE_NONCE_BYTES));
}
