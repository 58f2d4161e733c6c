// HPKE (RFC 9180), base mode only: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, and ChaCha20-Poly1305
// or AES-128-GCM, on node:crypto's synchronous primitives. A channel does one setup per
// session, so nothing here needs to be asynchronous; RFC 9180 Appendix A's vectors check it
// (test/hpke-vectors.test.ts), with @hpke/core as the reference it is compared against.
import * as nodeCrypto from "node:crypto";
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createPrivateKey,
  createPublicKey,
  createSecretKey,
  diffieHellman,
  generateKeyPairSync,
} from "node:crypto";
import type { KeyObject } from "node:crypto";

/** HKDF-SHA256's output size (`Nh`). */
export const NH = 32;
/** Bytes of an X25519 public key, private key, `enc` and shared secret. */
export const X25519_BYTES = 32;
export const TAG_BYTES = 16;

/** DER of an X25519 SubjectPublicKeyInfo up to the key itself (RFC 8410). */
export const X25519_SPKI_PREFIX = Buffer.from("302a300506032b656e032100", "hex");
/** DER of an X25519 PKCS#8 PrivateKeyInfo up to the key itself (RFC 8410). */
const X25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b656e04220420", "hex");

const VERSION_LABEL = Buffer.from("HPKE-v1");
const KEM_ID = 0x0020;
const KDF_ID = 0x0001;
const MODE_BASE = 0x00;
const KEM_SUITE_ID = Buffer.concat([Buffer.from("KEM"), u16(KEM_ID)]);
const EMPTY = Buffer.alloc(0);
const ZERO_SALT = Buffer.alloc(NH);

/** The node:crypto cipher names of the two AEADs (both take a 16-byte tag). */
export type AeadCipher = "chacha20-poly1305" | "aes-128-gcm";

/** One HPKE suite of DHKEM(X25519, HKDF-SHA256) and HKDF-SHA256: its AEAD. */
export interface AeadParams {
  aeadId: number;
  cipher: AeadCipher;
  /** Nk. */
  keyBytes: number;
  /** Nn. */
  nonceBytes: number;
}

export const CHACHA20_POLY1305: AeadParams = {
  aeadId: 0x0003,
  cipher: "chacha20-poly1305",
  keyBytes: 32,
  nonceBytes: 12,
};
export const AES_128_GCM: AeadParams = {
  aeadId: 0x0001,
  cipher: "aes-128-gcm",
  keyBytes: 16,
  nonceBytes: 12,
};

export class HpkeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HpkeError";
  }
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

function suiteId(aead: AeadParams): Buffer {
  return Buffer.concat([Buffer.from("HPKE"), u16(KEM_ID), u16(KDF_ID), u16(aead.aeadId)]);
}

// --- HMAC-SHA256 and HKDF (RFC 5869) -----------------------------------------------------------

const BLOCK = 64;
const IPAD = 0x36;
const OPAD = 0x5c;
/**
 * node's one-shot `crypto.hash` (Node ≥ 20.12). `createHmac` builds a native object per call,
 * which measured several times the cost of the two hashes an HMAC is; older Node falls back
 * to it.
 */
const oneShot = (nodeCrypto as { hash?: typeof nodeCrypto.hash }).hash;

/**
 * An HMAC-SHA256 key (RFC 2104) with its padded blocks made once, for a key that MACs many
 * messages (a channel's answer secret: one HKDF-Expand per answer).
 */
export class HmacKey {
  private readonly inner: Buffer;
  private readonly outer: Buffer;
  private readonly key: Uint8Array;

  constructor(key: Uint8Array) {
    this.key = key;
    const k = key.length > BLOCK ? sha256(key) : key;
    this.inner = Buffer.alloc(BLOCK, IPAD);
    this.outer = Buffer.alloc(BLOCK + NH, OPAD);
    for (let i = 0; i < k.length; i++) {
      this.inner[i]! ^= k[i]!;
      this.outer[i]! ^= k[i]!;
    }
  }

  /** HMAC-SHA256 of the parts, concatenated. */
  mac(...parts: Uint8Array[]): Buffer {
    if (oneShot === undefined) {
      const h = createHmac("sha256", this.key);
      for (const part of parts) h.update(part);
      return h.digest();
    }
    const innerHash = oneShot("sha256", Buffer.concat([this.inner, ...parts]), "buffer");
    innerHash.copy(this.outer, BLOCK);
    return oneShot("sha256", this.outer, "buffer");
  }
}

function sha256(data: Uint8Array): Buffer {
  return nodeCrypto.createHash("sha256").update(data).digest();
}

/** `HKDF-Extract(salt, ikm)`; an empty salt is `Nh` zero bytes. */
export function hkdfExtract(salt: Uint8Array, ikm: Uint8Array): Buffer {
  return new HmacKey(salt.length === 0 ? ZERO_SALT : salt).mac(ikm);
}

/** `HKDF-Expand(prk, info, length)`, `length` at most 255 × `Nh`. */
export function hkdfExpand(prk: Uint8Array | HmacKey, info: Uint8Array, length: number): Buffer {
  if (!(length >= 0 && length <= 255 * NH)) throw new RangeError("HKDF-Expand length");
  const key = prk instanceof HmacKey ? prk : new HmacKey(prk);
  const blocks: Buffer[] = [];
  let previous: Buffer = EMPTY;
  for (let counter = 1; blocks.length * NH < length; counter++) {
    previous = key.mac(previous, info, Buffer.of(counter));
    blocks.push(previous);
  }
  return Buffer.concat(blocks).subarray(0, length);
}

function labeledExtract(id: Buffer, salt: Uint8Array, label: string, ikm: Uint8Array): Buffer {
  return hkdfExtract(salt, Buffer.concat([VERSION_LABEL, id, Buffer.from(label), ikm]));
}

function labeledExpand(
  id: Buffer,
  prk: Uint8Array,
  label: string,
  info: Uint8Array,
  length: number,
): Buffer {
  const labeled = Buffer.concat([u16(length), VERSION_LABEL, id, Buffer.from(label), info]);
  return hkdfExpand(prk, labeled, length);
}

// --- X25519 keys ------------------------------------------------------------------------------

/** A raw 32-byte X25519 public key as a node:crypto key. @throws HpkeError */
export function x25519PublicKey(raw: Uint8Array): KeyObject {
  if (raw.length !== X25519_BYTES) throw new HpkeError("an X25519 public key is 32 bytes");
  return createPublicKey({
    key: Buffer.concat([X25519_SPKI_PREFIX, raw]),
    format: "der",
    type: "spki",
  });
}

/** A raw 32-byte X25519 private key as a node:crypto key. */
export function x25519PrivateKey(raw: Uint8Array): KeyObject {
  if (raw.length !== X25519_BYTES) throw new HpkeError("an X25519 private key is 32 bytes");
  return createPrivateKey({
    key: Buffer.concat([X25519_PKCS8_PREFIX, raw]),
    format: "der",
    type: "pkcs8",
  });
}

/** `SerializePublicKey`: the raw 32 bytes of an X25519 public (or private key's public) key. */
export function rawPublicKey(key: KeyObject): Buffer {
  const publicKey = key.type === "private" ? createPublicKey(key) : key;
  const der = publicKey.export({ format: "der", type: "spki" });
  return der.subarray(der.length - X25519_BYTES);
}

/** `SerializePrivateKey`: the raw 32 bytes of an X25519 private key. */
export function rawPrivateKey(key: KeyObject): Buffer {
  const der = key.export({ format: "der", type: "pkcs8" });
  return der.subarray(der.length - X25519_BYTES);
}

/** `DeriveKeyPair(ikm)` of DHKEM(X25519, HKDF-SHA256) (RFC 9180 §7.1.3). */
export function deriveKeyPair(ikm: Uint8Array): { privateKey: KeyObject; publicKey: Buffer } {
  const prk = labeledExtract(KEM_SUITE_ID, EMPTY, "dkp_prk", ikm);
  const privateKey = x25519PrivateKey(labeledExpand(KEM_SUITE_ID, prk, "sk", EMPTY, X25519_BYTES));
  return { privateKey, publicKey: rawPublicKey(privateKey) };
}

function dh(privateKey: KeyObject, publicKey: KeyObject): Buffer {
  let shared: Buffer;
  try {
    shared = diffieHellman({ privateKey, publicKey });
  } catch {
    throw new HpkeError("the X25519 agreement failed");
  }
  // A low-order point gives the all-zero value (RFC 9180 §7.1.4): refused, as the RFC says.
  if (shared.every((byte) => byte === 0)) throw new HpkeError("the X25519 agreement gave zero");
  return shared;
}

function extractAndExpand(dhValue: Buffer, kemContext: Buffer): Buffer {
  const prk = labeledExtract(KEM_SUITE_ID, EMPTY, "eae_prk", dhValue);
  return labeledExpand(KEM_SUITE_ID, prk, "shared_secret", kemContext, NH);
}

/**
 * `Encap(pkR)`: the shared secret and `enc`. `ephemeral` fixes `skE` (the RFC's vectors only;
 * otherwise a fresh key pair).
 */
export function encap(
  pkR: Uint8Array,
  ephemeral?: KeyObject,
): { sharedSecret: Buffer; enc: Buffer } {
  const skE = ephemeral ?? generateKeyPairSync("x25519").privateKey;
  const enc = rawPublicKey(skE);
  const sharedSecret = extractAndExpand(dh(skE, x25519PublicKey(pkR)), Buffer.concat([enc, pkR]));
  return { sharedSecret, enc };
}

/** `Decap(enc, skR)`. `pkR` is `skR`'s raw public key (the caller keeps it). @throws HpkeError */
export function decap(enc: Uint8Array, skR: KeyObject, pkR: Uint8Array): Buffer {
  return extractAndExpand(dh(skR, x25519PublicKey(enc)), Buffer.concat([enc, pkR]));
}

// --- Key schedule and contexts (RFC 9180 §5) --------------------------------------------------

/** What `KeySchedule` derives in base mode. */
export interface KeySchedule {
  aead: AeadParams;
  key: Buffer;
  baseNonce: Buffer;
  exporterSecret: Buffer;
}

/** `KeySchedule(mode_base, shared_secret, info, psk = "", psk_id = "")`. */
export function keySchedule(
  aead: AeadParams,
  sharedSecret: Uint8Array,
  info: Uint8Array,
): KeySchedule {
  const id = suiteId(aead);
  const pskIdHash = labeledExtract(id, EMPTY, "psk_id_hash", EMPTY);
  const infoHash = labeledExtract(id, EMPTY, "info_hash", info);
  const context = Buffer.concat([Buffer.of(MODE_BASE), pskIdHash, infoHash]);
  const secret = labeledExtract(id, sharedSecret, "secret", EMPTY);
  return {
    aead,
    key: labeledExpand(id, secret, "key", context, aead.keyBytes),
    baseNonce: labeledExpand(id, secret, "base_nonce", context, aead.nonceBytes),
    exporterSecret: labeledExpand(id, secret, "exp", context, NH),
  };
}

/** `Context.Export(exporter_context, L)`. */
export function exportSecret(
  schedule: KeySchedule,
  exporterContext: Uint8Array,
  length: number,
): Buffer {
  return labeledExpand(
    suiteId(schedule.aead),
    schedule.exporterSecret,
    "sec",
    exporterContext,
    length,
  );
}

/**
 * `ComputeNonce(seq)`: `base_nonce XOR I2OSP(seq, Nn)`, for any seq below 2^53 (the nonce's
 * last seven bytes hold it).
 */
export function computeNonce(baseNonce: Uint8Array, seq: number): Buffer {
  if (!(Number.isSafeInteger(seq) && seq >= 0)) throw new HpkeError("sequence number out of range");
  const nonce = Buffer.from(baseNonce);
  let rest = seq;
  for (let i = nonce.length - 1; rest > 0; i--) {
    nonce[i]! ^= rest % 256;
    rest = Math.floor(rest / 256);
  }
  return nonce;
}

const CIPHER_OPTIONS = { authTagLength: TAG_BYTES } as const;

/** The AEAD's seal: ciphertext ‖ 16-byte tag. `key` may be a KeyObject made once and reused. */
function aeadSeal(
  aead: AeadParams,
  key: KeyObject | Uint8Array,
  nonce: Uint8Array,
  aad: Uint8Array,
  plaintext: Uint8Array,
): Buffer {
  // The two names share options and output; the typings' overloads are per name.
  const cipher = createCipheriv(aead.cipher as "chacha20-poly1305", key, nonce, CIPHER_OPTIONS);
  cipher.setAAD(aad, { plaintextLength: plaintext.length });
  const body = cipher.update(plaintext);
  cipher.final();
  return Buffer.concat([body, cipher.getAuthTag()], body.length + TAG_BYTES);
}

/** The AEAD's open, or undefined when the ciphertext does not open. */
function aeadOpen(
  aead: AeadParams,
  key: KeyObject | Uint8Array,
  nonce: Uint8Array,
  aad: Uint8Array,
  sealed: Uint8Array,
): Buffer | undefined {
  if (sealed.length < TAG_BYTES) return undefined;
  const body = sealed.subarray(0, sealed.length - TAG_BYTES);
  const decipher = createDecipheriv(aead.cipher as "chacha20-poly1305", key, nonce, CIPHER_OPTIONS);
  decipher.setAAD(aad, { plaintextLength: body.length });
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  const plain = decipher.update(body);
  try {
    decipher.final();
  } catch {
    return undefined;
  }
  return plain;
}

/**
 * One AEAD key, made once, that seals and opens many messages: node:crypto's by default
 * (`nodeAeadKey`), or another implementation of the same AEAD for a process that seals many
 * small messages (the TD's, `@zml/seal/sodium`). Seal gives ciphertext ‖ 16-byte tag; open
 * gives undefined for anything that does not open.
 */
export interface AeadKey {
  seal(nonce: Uint8Array, aad: Uint8Array, plaintext: Uint8Array): Buffer;
  open(nonce: Uint8Array, aad: Uint8Array, sealed: Uint8Array): Buffer | undefined;
}

/** Makes the key of a suite's AEAD from its bytes. */
export type AeadKeyMaker = (aead: AeadParams, key: Uint8Array) => AeadKey;

/**
 * node:crypto's AEAD, the key a KeyObject made once (a cipher is made for each message, and
 * one made on a raw key buffer imports the key again each time).
 */
export const nodeAeadKey: AeadKeyMaker = (aead, key) => {
  const keyObject = createSecretKey(key);
  return {
    seal: (nonce, aad, plaintext) => aeadSeal(aead, keyObject, nonce, aad, plaintext),
    open: (nonce, aad, sealed) => aeadOpen(aead, keyObject, nonce, aad, sealed),
  };
};

/**
 * An HPKE context whose sequence number is given with each message rather than counted: the
 * RFC's `Seal`/`Open` at that number (its nonce is `ComputeNonce(seq)`). The caller must never
 * seal two messages at one number; the sealed channel's recipient refuses a number twice.
 */
export class HpkeContext {
  readonly schedule: KeySchedule;
  private readonly key: AeadKey;

  constructor(schedule: KeySchedule, makeKey: AeadKeyMaker = nodeAeadKey) {
    this.schedule = schedule;
    this.key = makeKey(schedule.aead, schedule.key);
  }

  seal(seq: number, aad: Uint8Array, plaintext: Uint8Array): Buffer {
    return this.key.seal(computeNonce(this.schedule.baseNonce, seq), aad, plaintext);
  }

  /** The plaintext, or undefined when it does not open at `seq` under `aad`. */
  open(seq: number, aad: Uint8Array, sealed: Uint8Array): Buffer | undefined {
    return this.key.open(computeNonce(this.schedule.baseNonce, seq), aad, sealed);
  }

  export(exporterContext: Uint8Array, length: number): Buffer {
    return exportSecret(this.schedule, exporterContext, length);
  }
}

/** `SetupBaseS(pkR, info)`: `enc` and the sender's context. */
export function setupBaseS(
  aead: AeadParams,
  pkR: Uint8Array,
  info: Uint8Array,
  ephemeral?: KeyObject,
  makeKey: AeadKeyMaker = nodeAeadKey,
): { enc: Buffer; context: HpkeContext } {
  const { sharedSecret, enc } = encap(pkR, ephemeral);
  return { enc, context: new HpkeContext(keySchedule(aead, sharedSecret, info), makeKey) };
}

/** `SetupBaseR(enc, skR, info)`: the recipient's context. @throws HpkeError */
export function setupBaseR(
  aead: AeadParams,
  enc: Uint8Array,
  skR: KeyObject,
  pkR: Uint8Array,
  info: Uint8Array,
  makeKey: AeadKeyMaker = nodeAeadKey,
): HpkeContext {
  return new HpkeContext(keySchedule(aead, decap(enc, skR, pkR), info), makeKey);
}
