// The HPKE suites the sealed channel uses, checked against RFC 9180's own vectors (base mode,
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM and ChaCha20-Poly1305).
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { describe, expect, it } from "vitest";
import { loadVectors } from "./vectors.ts";

const hex = (s: string) => new Uint8Array(Buffer.from(s, "hex"));
const toHex = (b: ArrayBuffer | Uint8Array) => Buffer.from(new Uint8Array(b)).toString("hex");

const vectors = loadVectors();

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
    const suite = new CipherSuite({
      kem: new DhkemX25519HkdfSha256(),
      kdf: new HkdfSha256(),
      aead: v.aeadId === 3 ? new Chacha20Poly1305() : new Aes128Gcm(),
    });
    const s = v.setup;

    it("derives the key pairs, the encapsulated key, every ciphertext and export", async () => {
      const recipient = await suite.kem.deriveKeyPair(hex(s["ikmR"]!));
      const ephemeral = await suite.kem.deriveKeyPair(hex(s["ikmE"]!));
      expect(toHex(await suite.kem.serializePublicKey(recipient.publicKey))).toBe(s["pkRm"]);
      expect(toHex(await suite.kem.serializePrivateKey(recipient.privateKey))).toBe(s["skRm"]);
      expect(toHex(await suite.kem.serializePublicKey(ephemeral.publicKey))).toBe(s["pkEm"]);

      const info = hex(s["info"]!);
      const sender = await suite.createSenderContext({
        recipientPublicKey: recipient.publicKey,
        info,
        ekm: ephemeral,
      });
      expect(toHex(sender.enc)).toBe(s["enc"]);
      const receiver = await suite.createRecipientContext({
        recipientKey: recipient.privateKey,
        enc: sender.enc,
        info,
      });
      // Contexts count their own sequence numbers: seal (and open) every number up to the
      // last vector's, checking the ones the RFC lists.
      const bySeq = new Map(v.encryptions.map((e) => [e.seq, e]));
      for (let seq = 0; seq <= 256; seq++) {
        const e = bySeq.get(seq);
        const pt = hex(e?.pt ?? "00");
        const aad = hex(e?.aad ?? "");
        const ct = await sender.seal(pt, aad);
        if (e) expect(toHex(ct), `seq ${seq}`).toBe(e.ct);
        expect(toHex(await receiver.open(ct, aad))).toBe(toHex(pt));
      }
      for (const x of v.exports) {
        expect(toHex(await sender.export(hex(x.context), x.length))).toBe(x.value);
        expect(toHex(await receiver.export(hex(x.context), x.length))).toBe(x.value);
      }
    });

    it("refuses a ciphertext with one bit flipped or under another AAD", async () => {
      const recipient = await suite.kem.deriveKeyPair(hex(s["ikmR"]!));
      const e = v.encryptions[0]!;
      const open = async (ct: Uint8Array, aad: Uint8Array) => {
        const receiver = await suite.createRecipientContext({
          recipientKey: recipient.privateKey,
          enc: hex(s["enc"]!),
          info: hex(s["info"]!),
        });
        return receiver.open(ct, aad);
      };
      expect(toHex(await open(hex(e.ct), hex(e.aad)))).toBe(e.pt);
      const flipped = hex(e.ct);
      flipped[3]! ^= 1;
      await expect(open(flipped, hex(e.aad))).rejects.toThrow();
      await expect(open(hex(e.ct), hex("00"))).rejects.toThrow();
    });
  });
});
