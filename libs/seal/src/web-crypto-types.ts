// @hpke/* declare their keys with the DOM's global `CryptoKey` and `CryptoKeyPair` types,
// which this workspace (Node types, no DOM lib) lacks: they are Node's WebCrypto types.
import type { webcrypto } from "node:crypto";

declare global {
  type CryptoKey = webcrypto.CryptoKey;
  type CryptoKeyPair = webcrypto.CryptoKeyPair;
}
