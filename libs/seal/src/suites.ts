// The HPKE suites of the sealed channel, built once: DHKEM(X25519, HKDF-SHA256) and
// HKDF-SHA256 with the AEAD the suite names.
import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { SEALED_SUITES } from "@zml/contracts/sealed";
import type { SealedSuite } from "@zml/contracts/sealed";
import "./web-crypto-types.ts";

/** What sealing under one suite needs: the HPKE suite and its AEAD for the answer's chunks. */
export interface SuiteParams {
  name: SealedSuite;
  hpke: CipherSuite;
  /** The `node:crypto` cipher the answer's chunks are sealed with (the suite's AEAD). */
  cipher: "chacha20-poly1305" | "aes-128-gcm";
  /** Nk: AEAD key bytes. */
  keyBytes: number;
  /** Nn: AEAD nonce bytes. */
  nonceBytes: number;
}

// The KEM is @hpke/core's own X25519 on WebCrypto rather than @hpke/dhkem-x25519's pure-JS
// one: the same RFC 9180 KEM (both pass the RFC's vectors), about three times faster here.
function build(name: SealedSuite): SuiteParams {
  const chacha = name === "x25519-sha256-chacha20poly1305";
  return {
    name,
    hpke: new CipherSuite({
      kem: new DhkemX25519HkdfSha256(),
      kdf: new HkdfSha256(),
      aead: chacha ? new Chacha20Poly1305() : new Aes128Gcm(),
    }),
    cipher: chacha ? "chacha20-poly1305" : "aes-128-gcm",
    keyBytes: chacha ? 32 : 16,
    nonceBytes: 12,
  };
}

const SUITES = new Map(SEALED_SUITES.map((name) => [name, build(name)]));

/** The parameters of a suite; every name in `SEALED_SUITES` has some. */
export function suiteOf(name: SealedSuite): SuiteParams {
  return SUITES.get(name)!;
}

/** The KEM every suite shares, for session keys (a key pair serves any suite). */
export function sessionKem(): CipherSuite["kem"] {
  return suiteOf("x25519-sha256-chacha20poly1305").hpke.kem;
}
