// The answer's keys, derived from the request's HPKE context as OHTTP derives its response
// keys (RFC 9458 §4.4), and its chunks, each sealed under its own nonce with the last one
// marked, as chunked OHTTP does: a dropped, reordered, cut or substituted chunk fails to open.
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";
import { SEALED_FINAL_CHUNK_AAD, SEALED_RESPONSE_NONCE_BYTES } from "@zml/contracts/sealed";
import type { SuiteParams } from "./suites.ts";

const TAG_BYTES = 16;
const FINAL_AAD = Buffer.from(SEALED_FINAL_CHUNK_AAD);
const NO_AAD = Buffer.alloc(0);
/** Chunks one answer may have: the counter fills the nonce's last four bytes at most. */
const MAX_CHUNKS = 2 ** 32;

/** The key and base nonce an answer's chunks are sealed under. */
export interface ResponseKeys {
  suite: SuiteParams;
  key: Buffer;
  baseNonce: Buffer;
}

/**
 * `prk = HKDF-Extract(enc ‖ response_nonce, secret)`, `key = HKDF-Expand(prk, "key", Nk)`,
 * `base_nonce = HKDF-Expand(prk, "nonce", Nn)`. Both lengths fit one HMAC block, so Expand is
 * `HMAC(prk, info ‖ 0x01)` cut to length.
 */
export function deriveResponseKeys(
  suite: SuiteParams,
  secret: Uint8Array,
  enc: Uint8Array,
  responseNonce: Uint8Array,
): ResponseKeys {
  const prk = createHmac("sha256", Buffer.concat([enc, responseNonce]))
    .update(secret)
    .digest();
  const expand = (info: string, length: number) =>
    createHmac("sha256", prk).update(info).update(Buffer.of(1)).digest().subarray(0, length);
  return {
    suite,
    key: expand("key", suite.keyBytes),
    baseNonce: expand("nonce", suite.nonceBytes),
  };
}

/** `base_nonce XOR I2OSP(i, Nn)`. */
function chunkNonce(keys: ResponseKeys, index: number): Buffer {
  if (!(index >= 0 && index < MAX_CHUNKS)) throw new RangeError("too many chunks in one answer");
  const nonce = Buffer.from(keys.baseNonce);
  const at = nonce.length - 4;
  nonce.writeUInt32BE((nonce.readUInt32BE(at) ^ index) >>> 0, at);
  return nonce;
}

const CIPHER_OPTIONS = { authTagLength: TAG_BYTES } as const;

// Both AEADs take the same options and a 16-byte tag; the overloads are per name.
type AeadName = "chacha20-poly1305";

export function sealChunk(
  keys: ResponseKeys,
  index: number,
  plaintext: Uint8Array,
  final: boolean,
): Buffer {
  const cipher = createCipheriv(
    keys.suite.cipher as AeadName,
    keys.key,
    chunkNonce(keys, index),
    CIPHER_OPTIONS,
  );
  cipher.setAAD(final ? FINAL_AAD : NO_AAD, { plaintextLength: plaintext.length });
  return Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
}

/** The chunk's plaintext, or undefined when it does not open as chunk `index` (final or not). */
export function openChunk(
  keys: ResponseKeys,
  index: number,
  sealed: Uint8Array,
  final: boolean,
): Buffer | undefined {
  if (sealed.length < TAG_BYTES) return undefined;
  const body = sealed.subarray(0, sealed.length - TAG_BYTES);
  const decipher = createDecipheriv(
    keys.suite.cipher as AeadName,
    keys.key,
    chunkNonce(keys, index),
    CIPHER_OPTIONS,
  );
  decipher.setAAD(final ? FINAL_AAD : NO_AAD, { plaintextLength: body.length });
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(body), decipher.final()]);
  } catch {
    return undefined;
  }
}

/** A fresh response nonce. */
export function newResponseNonce(): Buffer {
  return randomBytes(SEALED_RESPONSE_NONCE_BYTES);
}
