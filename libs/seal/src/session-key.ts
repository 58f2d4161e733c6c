// Session keys: X25519 key pairs made inside the TD, published as SPKI DER (which REPORTDATA
// binds by its SHA-256, the `key_id`), used by HPKE as the raw 32-byte key.
import { createHash, generateKeyPairSync } from "node:crypto";
import type { KeyObject } from "node:crypto";
import { X25519_BYTES, X25519_SPKI_PREFIX } from "./hpke.ts";

/** A session's public key as a client holds it. */
export interface SessionPublicKey {
  /** Lowercase hex SHA-256 of the SPKI DER: the envelope's `key_id`. */
  keyId: string;
  /** The raw X25519 key, HPKE's `pkR`. */
  raw: Buffer;
}

/** A session key pair as the TD holds it; the private key never leaves memory. */
export interface SessionKeyPair {
  keyId: string;
  /** SPKI DER of the public key: what the quote binds and the session publishes. */
  publicKeySpki: Buffer;
  /** The raw public key, HPKE's `pkR` (its KEM context needs it on every setup). */
  publicKeyRaw: Buffer;
  privateKey: KeyObject;
}

/** SHA-256 (lowercase hex) of an SPKI DER. */
export function keyIdOf(spkiDer: Uint8Array): string {
  return createHash("sha256").update(spkiDer).digest("hex");
}

/**
 * Reads a session's published key (base64 SPKI DER, as `session_public_key` carries it).
 * @throws TypeError when it is not an X25519 SPKI.
 */
export function sessionPublicKeyOf(spkiBase64: string): SessionPublicKey {
  const der = Buffer.from(spkiBase64, "base64");
  if (
    der.length !== X25519_SPKI_PREFIX.length + X25519_BYTES ||
    !der.subarray(0, X25519_SPKI_PREFIX.length).equals(X25519_SPKI_PREFIX)
  ) {
    throw new TypeError("session_public_key is not an X25519 SubjectPublicKeyInfo");
  }
  return { keyId: keyIdOf(der), raw: der.subarray(X25519_SPKI_PREFIX.length) };
}

/** A fresh session key pair. */
export function createSessionKeyPair(): SessionKeyPair {
  const { publicKey, privateKey } = generateKeyPairSync("x25519");
  const publicKeySpki = publicKey.export({ format: "der", type: "spki" });
  return {
    keyId: keyIdOf(publicKeySpki),
    publicKeySpki,
    publicKeyRaw: publicKeySpki.subarray(X25519_SPKI_PREFIX.length),
    privateKey,
  };
}
