// The suites of the sealed channel: DHKEM(X25519, HKDF-SHA256) and HKDF-SHA256 with the AEAD
// the suite names, for the channel's HPKE setup, its requests and its answers' chunks.
import type { SealedSuite } from "@zml/contracts/sealed";
import { AES_128_GCM, CHACHA20_POLY1305 } from "./hpke.ts";
import type { AeadParams } from "./hpke.ts";

export interface SuiteParams {
  name: SealedSuite;
  aead: AeadParams;
}

const SUITES: Record<SealedSuite, SuiteParams> = {
  "x25519-sha256-chacha20poly1305": {
    name: "x25519-sha256-chacha20poly1305",
    aead: CHACHA20_POLY1305,
  },
  "x25519-sha256-aes128gcm": { name: "x25519-sha256-aes128gcm", aead: AES_128_GCM },
};

/** The parameters of a suite; every name in `SEALED_SUITES` has some. */
export function suiteOf(name: SealedSuite): SuiteParams {
  return SUITES[name];
}
