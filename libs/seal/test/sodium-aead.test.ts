// libsodium's ChaCha20-Poly1305 (the TD's sealer of every event) is the AEAD node:crypto's is:
// RFC 8439's own vector, the same bytes for random keys, nonces and messages, and refusal of
// anything altered. AES-128-GCM keys stay node:crypto's.
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { AES_128_GCM, CHACHA20_POLY1305, nodeAeadKey, TAG_BYTES } from "../src/hpke.ts";
import { sodiumAeadKeys } from "../src/sodium-aead.ts";

const hex = (s: string) => Buffer.from(s.replace(/\s/g, ""), "hex");
const sodiumKey = await sodiumAeadKeys();

describe("libsodium's ChaCha20-Poly1305", () => {
  it("gives RFC 8439 §2.8.2's tag and ciphertext, and opens it", () => {
    const key = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
    const nonce = hex("070000004041424344454647");
    const aad = hex("50515253c0c1c2c3c4c5c6c7");
    const plaintext = Buffer.from(
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the " +
        "future, sunscreen would be it.",
    );
    const sealed = sodiumKey(CHACHA20_POLY1305, key).seal(nonce, aad, plaintext);
    expect(sealed.subarray(0, 16).toString("hex")).toBe("d31a8d34648e60db7b86afbc53ef7ec2");
    expect(sealed.subarray(sealed.length - TAG_BYTES).toString("hex")).toBe(
      "1ae10b594f09e26a7e902ecbd0600691",
    );
    expect(sodiumKey(CHACHA20_POLY1305, key).open(nonce, aad, sealed)).toEqual(plaintext);
  });

  it("seals and opens the bytes node:crypto does, for any key, nonce, AAD and length", () => {
    // Past 64 KiB a message goes to node:crypto rather than through libsodium's scratch area.
    for (const length of [0, 1, 15, 16, 17, 63, 64, 65, 200, 4096, 65_536, 65_537, 300_000]) {
      const key = randomBytes(32);
      const nonce = randomBytes(12);
      const aad = randomBytes(length % 3 === 0 ? 0 : 13);
      const plaintext = randomBytes(length);
      const bySodium = sodiumKey(CHACHA20_POLY1305, key).seal(nonce, aad, plaintext);
      const byNode = nodeAeadKey(CHACHA20_POLY1305, key).seal(nonce, aad, plaintext);
      expect(bySodium.toString("hex"), `length ${length}`).toBe(byNode.toString("hex"));
      expect(sodiumKey(CHACHA20_POLY1305, key).open(nonce, aad, byNode)).toEqual(plaintext);
      expect(nodeAeadKey(CHACHA20_POLY1305, key).open(nonce, aad, bySodium)).toEqual(plaintext);
    }
  });

  it("refuses a flipped bit, another nonce, another AAD, another key and a short message", () => {
    const key = randomBytes(32);
    const nonce = randomBytes(12);
    const aad = Buffer.from("final");
    const sodium = sodiumKey(CHACHA20_POLY1305, key);
    const sealed = sodium.seal(nonce, aad, Buffer.from("an event"));
    for (let bit = 0; bit < sealed.length * 8; bit += 7) {
      const flipped = Buffer.from(sealed);
      flipped[bit >> 3]! ^= 1 << (bit & 7);
      expect(sodium.open(nonce, aad, flipped), `bit ${bit}`).toBeUndefined();
    }
    const otherNonce = Buffer.from(nonce);
    otherNonce[11]! ^= 1;
    expect(sodium.open(otherNonce, aad, sealed)).toBeUndefined();
    expect(sodium.open(nonce, Buffer.alloc(0), sealed)).toBeUndefined();
    expect(sodiumKey(CHACHA20_POLY1305, randomBytes(32)).open(nonce, aad, sealed)).toBeUndefined();
    expect(sodium.open(nonce, aad, sealed.subarray(0, TAG_BYTES - 1))).toBeUndefined();
    expect(sodium.open(nonce, aad, sealed)).toEqual(Buffer.from("an event"));
  });

  it("leaves nothing of a key or a message in libsodium's memory after a call", async () => {
    const { libsodium } = (await import("libsodium-wrappers")) as unknown as {
      libsodium: { HEAPU8: Uint8Array };
    };
    const key = Buffer.alloc(32, 0xa7);
    const plaintext = Buffer.from("a marker: 5d1c0b7e-prompt-text-".repeat(4));
    const sealed = sodiumKey(CHACHA20_POLY1305, key).seal(
      randomBytes(12),
      Buffer.alloc(0),
      plaintext,
    );
    expect(sealed).toHaveLength(plaintext.length + TAG_BYTES);
    const memory = Buffer.from(libsodium.HEAPU8.buffer);
    expect(memory.indexOf(plaintext.subarray(0, 32))).toBe(-1);
    expect(memory.indexOf(key)).toBe(-1);
  });

  it("refuses a key or a nonce of the wrong size", () => {
    expect(() => sodiumKey(CHACHA20_POLY1305, randomBytes(16))).toThrow(RangeError);
    const key = sodiumKey(CHACHA20_POLY1305, randomBytes(32));
    expect(() => key.seal(randomBytes(8), Buffer.alloc(0), Buffer.from("x"))).toThrow(RangeError);
  });

  it("leaves AES-128-GCM to node:crypto, with the same bytes", () => {
    const key = randomBytes(16);
    const nonce = randomBytes(12);
    const plaintext = randomBytes(100);
    const sealed = sodiumKey(AES_128_GCM, key).seal(nonce, Buffer.alloc(0), plaintext);
    expect(sealed).toEqual(nodeAeadKey(AES_128_GCM, key).seal(nonce, Buffer.alloc(0), plaintext));
  });
});
