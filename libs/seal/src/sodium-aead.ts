// ChaCha20-Poly1305 (RFC 8439, the IETF variant HPKE uses) from libsodium's WebAssembly build,
// for the process that seals every event of every tier-4 stream: the TD. node:crypto makes a
// cipher object for each message, and at an event's size (about 200 bytes) that object, not
// the cipher, is most of the cost: about 3.6 µs a message against libsodium's 1.1 µs here.
// The bytes are the same (test/sodium-aead.test.ts checks them against node:crypto and RFC
// 8439's vector). AES-128-GCM, which libsodium does not offer, stays on node:crypto.
// A subpath of its own, so the SDKs, which open a stream's events rather than seal them, do
// not bundle the WebAssembly.
import sodium from "libsodium-wrappers";
import { nodeAeadKey, TAG_BYTES } from "./hpke.ts";
import type { AeadKey, AeadKeyMaker } from "./hpke.ts";

/** libsodium's output as a Buffer over the same memory (no copy). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function chacha20Poly1305Key(key: Uint8Array): AeadKey {
  return {
    seal: (nonce, aad, plaintext) =>
      asBuffer(sodium.crypto_aead_chacha20poly1305_ietf_encrypt(plaintext, aad, null, nonce, key)),
    open: (nonce, aad, sealed) => {
      if (sealed.length < TAG_BYTES) return undefined;
      try {
        return asBuffer(
          sodium.crypto_aead_chacha20poly1305_ietf_decrypt(null, sealed, aad, nonce, key),
        );
      } catch {
        // libsodium throws for a message that does not open; the caller wants undefined.
        return undefined;
      }
    },
  };
}

/**
 * The AEAD key maker that seals ChaCha20-Poly1305 with libsodium, once its WebAssembly has
 * loaded (call once at start-up), and AES-128-GCM with node:crypto.
 */
export async function sodiumAeadKeys(): Promise<AeadKeyMaker> {
  await sodium.ready;
  return (aead, key) =>
    aead.cipher === "chacha20-poly1305" ? chacha20Poly1305Key(key) : nodeAeadKey(aead, key);
}
