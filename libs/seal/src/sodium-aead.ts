// ChaCha20-Poly1305 (RFC 8439, the IETF variant HPKE uses) from libsodium's WebAssembly build,
// for the process that seals every event of every tier-4 stream: the TD. node:crypto makes a
// cipher object for each message, and at an event's size (about 200 bytes) that object, not
// the cipher, is most of the cost: about 3.6 µs a message here against 0.6 µs.
//
// The calls go to libsodium's own functions in the WebAssembly module, through one scratch
// area of its memory, and not through libsodium-wrappers' JavaScript functions: those allocate
// the key, nonce, AAD and message in that memory on every call and return the result in a new
// off-heap Uint8Array (1.1 µs a call, and that garbage to collect). The module is the one
// libsodium-wrappers loads and exports as `libsodium`; the package is pinned to one version,
// and test/sodium-aead.test.ts checks RFC 8439's vector and node:crypto's bytes both ways, so
// an upgrade that changed the functions fails there. AES-128-GCM, which libsodium does not
// offer, and messages over 64 KiB stay on node:crypto. A subpath of its own, so the SDKs,
// which open a stream's events rather than seal them, do not bundle the WebAssembly.
import * as sodiumWrappers from "libsodium-wrappers";
import { CHACHA20_POLY1305, nodeAeadKey, TAG_BYTES } from "./hpke.ts";
import type { AeadKey, AeadKeyMaker } from "./hpke.ts";

/**
 * What is used of the module (emscripten's): the C functions of `crypto_aead_chacha20poly1305_
 * ietf_{encrypt,decrypt}`, each 64-bit length given as two 32-bit arguments, low half first.
 */
interface SodiumModule {
  HEAPU8: Uint8Array;
  _malloc(size: number): number;
  _free(address: number): void;
  _crypto_aead_chacha20poly1305_ietf_encrypt(...args: number[]): number;
  _crypto_aead_chacha20poly1305_ietf_decrypt(...args: number[]): number;
}

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
/** Messages up to this size go through the scratch area (so it stays under about 128 KiB). */
const SCRATCH_MESSAGE_BYTES = 64 * 1024;

/**
 * One area of the module's memory for a call's key, nonce, AAD, input and output. Calls are
 * synchronous and JavaScript runs one at a time, so one area serves every key. It is zeroed
 * after each call: neither a key nor a plaintext stays in it.
 */
class ScratchCall {
  private readonly sodium: SodiumModule;
  private address = 0;
  private size = 0;

  constructor(sodium: SodiumModule) {
    this.sodium = sodium;
  }

  /**
   * Lays out key, nonce, AAD and input, runs `call` with the addresses of output, input, AAD,
   * nonce and key, and gives `outputBytes` of output in a Buffer of its own, or undefined when
   * `call` refused (a message that does not open).
   */
  run(
    key: Uint8Array,
    nonce: Uint8Array,
    aad: Uint8Array,
    input: Uint8Array,
    outputBytes: number,
    call: (output: number, input: number, aad: number, nonce: number, key: number) => number,
  ): Buffer | undefined {
    const base = this.reserve(KEY_BYTES + NONCE_BYTES + aad.length + input.length + outputBytes);
    const nonceAt = base + KEY_BYTES;
    const aadAt = nonceAt + NONCE_BYTES;
    const inputAt = aadAt + aad.length;
    const outputAt = inputAt + input.length;
    // Read after reserve(): a memory that grew is a new ArrayBuffer.
    const heap = this.sodium.HEAPU8;
    heap.set(key, base);
    heap.set(nonce, nonceAt);
    heap.set(aad, aadAt);
    heap.set(input, inputAt);
    const ok = call(outputAt, inputAt, aadAt, nonceAt, base) === 0;
    const output = ok ? Buffer.from(heap.subarray(outputAt, outputAt + outputBytes)) : undefined;
    heap.fill(0, base, outputAt + outputBytes);
    return output;
  }

  private reserve(bytes: number): number {
    if (bytes > this.size) {
      if (this.address !== 0) this.sodium._free(this.address);
      this.size = Math.max(bytes, 4096);
      this.address = this.sodium._malloc(this.size);
      if (this.address === 0) throw new Error("libsodium's memory is exhausted");
    }
    return this.address;
  }
}

function chacha20Poly1305Keys(sodium: SodiumModule): (key: Uint8Array) => AeadKey {
  const scratch = new ScratchCall(sodium);
  return (key) => {
    if (key.length !== KEY_BYTES) throw new RangeError("a ChaCha20-Poly1305 key is 32 bytes");
    let large: AeadKey | undefined;
    const largeKey = () => (large ??= nodeAeadKey(CHACHA20_POLY1305, key));
    return {
      seal: (nonce, aad, plaintext) => {
        checkNonce(nonce);
        if (plaintext.length > SCRATCH_MESSAGE_BYTES) return largeKey().seal(nonce, aad, plaintext);
        const mlen = plaintext.length;
        return scratch.run(key, nonce, aad, plaintext, mlen + TAG_BYTES, (c, m, ad, n, k) =>
          sodium._crypto_aead_chacha20poly1305_ietf_encrypt(
            c,
            0,
            m,
            mlen,
            0,
            ad,
            aad.length,
            0,
            0,
            n,
            k,
          ),
        )!;
      },
      open: (nonce, aad, sealed) => {
        checkNonce(nonce);
        if (sealed.length < TAG_BYTES) return undefined;
        if (sealed.length > SCRATCH_MESSAGE_BYTES) return largeKey().open(nonce, aad, sealed);
        const clen = sealed.length;
        return scratch.run(key, nonce, aad, sealed, clen - TAG_BYTES, (m, c, ad, n, k) =>
          sodium._crypto_aead_chacha20poly1305_ietf_decrypt(
            m,
            0,
            0,
            c,
            clen,
            0,
            ad,
            aad.length,
            0,
            n,
            k,
          ),
        );
      },
    };
  };
}

function checkNonce(nonce: Uint8Array): void {
  if (nonce.length !== NONCE_BYTES) throw new RangeError("a ChaCha20-Poly1305 nonce is 12 bytes");
}

/**
 * The AEAD key maker that seals ChaCha20-Poly1305 with libsodium, once its WebAssembly has
 * loaded (call once at start-up), and AES-128-GCM with node:crypto.
 */
export async function sodiumAeadKeys(): Promise<AeadKeyMaker> {
  await sodiumWrappers.ready;
  const sodium = (sodiumWrappers as unknown as { libsodium?: SodiumModule }).libsodium;
  if (typeof sodium?._crypto_aead_chacha20poly1305_ietf_encrypt !== "function") {
    throw new Error("libsodium-wrappers does not export its module as `libsodium`");
  }
  const chacha = chacha20Poly1305Keys(sodium);
  return (aead, key) =>
    aead.cipher === "chacha20-poly1305" ? chacha(key) : nodeAeadKey(aead, key);
}
