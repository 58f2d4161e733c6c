// The channel's HPKE (src/hpke.ts, on node:crypto's synchronous primitives) checked against
// RFC 9180's own vectors (base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM and
// ChaCha20-Poly1305), and against @hpke/core, the reference implementation, both ways. The
// messages are sealed and opened with node:crypto's AEAD and with libsodium's (the TD's).
import { createHmac, generateKeyPairSync, hkdfSync } from "node:crypto";
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { describe, expect, it } from "vitest";
import {
  AES_128_GCM,
  CHACHA20_POLY1305,
  computeNonce,
  decap,
  deriveKeyPair,
  encap,
  hkdfExpand,
  hkdfExtract,
  HmacKey,
  HpkeError,
  keySchedule,
  nodeAeadKey,
  rawPrivateKey,
  rawPublicKey,
  setupBaseR,
  setupBaseS,
  x25519PrivateKey,
} from "../src/hpke.ts";
import { sodiumAeadKeys } from "../src/sodium-aead.ts";
import { loadVectors } from "./vectors.ts";

const hex = (s: string) => Buffer.from(s, "hex");
const toHex = (b: ArrayBuffer | Uint8Array) => Buffer.from(new Uint8Array(b)).toString("hex");

const vectors = loadVectors();
const keyMakers = [
  ["node:crypto", nodeAeadKey],
  ["libsodium", await sodiumAeadKeys()],
] as const;

describe("RFC 9180 vectors", () => {
  it("are both suites of the channel", () => {
    expect(vectors.map((v) => v.aeadId).sort()).toEqual([1, 3]);
    for (const v of vectors) {
      expect(v.setup).toMatchObject({ mode: "0", kem_id: "32", kdf_id: "1" });
      expect(v.encryptions.map((e) => e.seq)).toEqual([0, 1, 2, 4, 255, 256]);
      expect(v.exports).toHaveLength(3);
    }
  });

  describe.each(
    vectors.map((v) => [v.aeadId === 3 ? "ChaCha20-Poly1305" : "AES-128-GCM", v] as const),
  )("%s", (_name, v) => {
    const aead = v.aeadId === 3 ? CHACHA20_POLY1305 : AES_128_GCM;
    const s = v.setup;

    it("derive the key pairs, the shared secret and the key schedule", () => {
      const recipient = deriveKeyPair(hex(s["ikmR"]!));
      const ephemeral = deriveKeyPair(hex(s["ikmE"]!));
      expect(toHex(recipient.publicKey)).toBe(s["pkRm"]);
      expect(toHex(rawPrivateKey(recipient.privateKey))).toBe(s["skRm"]);
      expect(toHex(ephemeral.publicKey)).toBe(s["pkEm"]);
      expect(toHex(rawPrivateKey(ephemeral.privateKey))).toBe(s["skEm"]);

      const { sharedSecret, enc } = encap(recipient.publicKey, ephemeral.privateKey);
      expect(toHex(enc)).toBe(s["enc"]);
      expect(toHex(sharedSecret)).toBe(s["shared_secret"]);
      expect(toHex(decap(enc, recipient.privateKey, recipient.publicKey))).toBe(s["shared_secret"]);
      const schedule = keySchedule(aead, sharedSecret, hex(s["info"]!));
      expect(toHex(schedule.key)).toBe(s["key"]);
      expect(toHex(schedule.baseNonce)).toBe(s["base_nonce"]);
      expect(toHex(schedule.exporterSecret)).toBe(s["exporter_secret"]);
    });

    it.each(keyMakers)(
      "seal and open every listed message at its sequence number, and export (%s)",
      (_impl, makeKey) => {
        const recipient = deriveKeyPair(hex(s["ikmR"]!));
        const ephemeral = deriveKeyPair(hex(s["ikmE"]!));
        const info = hex(s["info"]!);
        const { enc, context: sender } = setupBaseS(
          aead,
          recipient.publicKey,
          info,
          ephemeral.privateKey,
          makeKey,
        );
        expect(toHex(enc)).toBe(s["enc"]);
        const receiver = setupBaseR(
          aead,
          enc,
          recipient.privateKey,
          recipient.publicKey,
          info,
          makeKey,
        );
        for (const e of v.encryptions) {
          expect(toHex(computeNonce(sender.schedule.baseNonce, e.seq)), `nonce ${e.seq}`).toBe(
            e.nonce,
          );
          const ct = sender.seal(e.seq, hex(e.aad), hex(e.pt));
          expect(toHex(ct), `seq ${e.seq}`).toBe(e.ct);
          expect(toHex(receiver.open(e.seq, hex(e.aad), ct)!)).toBe(e.pt);
          // At another number, or under another AAD, it does not open.
          expect(receiver.open(e.seq + 1, hex(e.aad), ct)).toBeUndefined();
          expect(receiver.open(e.seq, hex("00"), ct)).toBeUndefined();
        }
        for (const x of v.exports) {
          expect(toHex(sender.export(hex(x.context), x.length))).toBe(x.value);
          expect(toHex(receiver.export(hex(x.context), x.length))).toBe(x.value);
        }
      },
    );

    it.each(keyMakers)("refuse a ciphertext with one bit flipped (%s)", (_impl, makeKey) => {
      const recipient = deriveKeyPair(hex(s["ikmR"]!));
      const receiver = setupBaseR(
        aead,
        hex(s["enc"]!),
        recipient.privateKey,
        recipient.publicKey,
        hex(s["info"]!),
        makeKey,
      );
      const e = v.encryptions[0]!;
      const flipped = hex(e.ct);
      flipped[3]! ^= 1;
      expect(receiver.open(e.seq, hex(e.aad), flipped)).toBeUndefined();
      expect(receiver.open(e.seq, hex(e.aad), hex(e.ct).subarray(0, 15))).toBeUndefined();
    });
  });
});

describe("against @hpke/core, the reference", () => {
  describe.each([
    ["ChaCha20-Poly1305", CHACHA20_POLY1305, () => new Chacha20Poly1305()],
    ["AES-128-GCM", AES_128_GCM, () => new Aes128Gcm()],
  ] as const)("%s", (_name, aead, referenceAead) => {
    const reference = new CipherSuite({
      kem: new DhkemX25519HkdfSha256(),
      kdf: new HkdfSha256(),
      aead: referenceAead(),
    });
    const info = Buffer.from("zml-sealed/2 channel");
    const label = Buffer.from("zml-sealed/2 answer");

    it("opens what this implementation seals, and exports the same secret", async () => {
      const pair = generateKeyPairSync("x25519");
      const pkR = rawPublicKey(pair.publicKey);
      const { enc, context } = setupBaseS(aead, pkR, info);
      const recipientKey = await reference.kem.importKey(
        "raw",
        rawPrivateKey(pair.privateKey),
        false,
      );
      const theirs = await reference.createRecipientContext({ recipientKey, enc, info });
      // The reference counts its numbers: messages 0, 1, 2 in order.
      for (let seq = 0; seq < 3; seq++) {
        const pt = Buffer.from(`message ${seq}`);
        const aad = Buffer.from(`aad ${seq}`);
        expect(Buffer.from(await theirs.open(context.seal(seq, aad, pt), aad)).equals(pt)).toBe(
          true,
        );
      }
      expect(toHex(await theirs.export(label, 32))).toBe(toHex(context.export(label, 32)));
    });

    it("seals what this implementation opens at the same numbers", async () => {
      const pair = generateKeyPairSync("x25519");
      const pkR = rawPublicKey(pair.publicKey);
      const recipientPublicKey = await reference.kem.deserializePublicKey(pkR);
      const theirs = await reference.createSenderContext({ recipientPublicKey, info });
      const enc = Buffer.from(theirs.enc);
      const ours = setupBaseR(aead, enc, pair.privateKey, pkR, info);
      for (let seq = 0; seq < 3; seq++) {
        const pt = Buffer.from(`message ${seq}`);
        const sealed = Buffer.from(await theirs.seal(pt, Buffer.alloc(0)));
        expect(ours.open(seq, Buffer.alloc(0), sealed)?.equals(pt)).toBe(true);
      }
      expect(toHex(ours.export(label, 32))).toBe(toHex(await theirs.export(label, 32)));
    });
  });
});

describe("the building blocks", () => {
  it("HMAC and HKDF are RFC 2104's and RFC 5869's (node's own createHmac and hkdfSync agree)", () => {
    for (const keyLength of [0, 16, 32, 64, 65, 200]) {
      const k = Buffer.alloc(keyLength, 7);
      const hmac = new HmacKey(k);
      for (const data of [Buffer.alloc(0), Buffer.from("abc"), Buffer.alloc(300, 1)]) {
        expect(toHex(hmac.mac(data.subarray(0, 1), data.subarray(1)))).toBe(
          toHex(createHmac("sha256", k).update(data).digest()),
        );
      }
    }
    const ikm = Buffer.alloc(22, 0x0b);
    const salt = hex("000102030405060708090a0b0c");
    const info = hex("f0f1f2f3f4f5f6f7f8f9");
    // RFC 5869 test case 1.
    expect(toHex(hkdfExpand(hkdfExtract(salt, ikm), info, 42))).toBe(
      "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
    );
    for (const length of [12, 16, 32, 33, 100]) {
      expect(toHex(hkdfExpand(hkdfExtract(salt, ikm), info, length))).toBe(
        toHex(Buffer.from(hkdfSync("sha256", ikm, salt, info, length))),
      );
    }
  });

  it("refuse a low-order point and keys of the wrong size", () => {
    const { privateKey, publicKey } = deriveKeyPair(Buffer.alloc(32, 2));
    expect(() => encap(Buffer.alloc(32))).toThrow(HpkeError);
    expect(() => decap(Buffer.alloc(32), privateKey, publicKey)).toThrow(HpkeError);
    expect(() => decap(Buffer.alloc(31, 1), privateKey, publicKey)).toThrow(HpkeError);
    expect(() => x25519PrivateKey(Buffer.alloc(31))).toThrow(HpkeError);
  });

  it("put a sequence number up to 2^53 - 1 into the nonce's last seven bytes", () => {
    const base = Buffer.alloc(12);
    expect(toHex(computeNonce(base, 2 ** 53 - 1))).toBe("00000000001fffffffffffff");
    expect(toHex(computeNonce(base, 256))).toBe("000000000000000000000100");
    expect(() => computeNonce(base, 2 ** 53)).toThrow(HpkeError);
    expect(() => computeNonce(base, -1)).toThrow(HpkeError);
  });
});
