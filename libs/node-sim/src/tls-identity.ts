// The TLS identity of a simulated node. In TEE mode the key is made "inside the TD" (in this
// process, never written anywhere) and the quote binds its hash; nothing chains to a CA.
import { createPrivateKey, generateKeyPairSync } from "node:crypto";
import { spkiSha256 } from "@zml/tdx";
import { createSelfSignedCertificate } from "@zml/tdx/testing";

/** A key and its self-signed certificate, as `node:tls` takes them. */
export interface TlsIdentity {
  keyPem: string;
  certPem: string;
  /** SHA-256 (hex) of the key's SPKI DER: what REPORTDATA binds and dispatchers pin. */
  keySha256: string;
}

/** A fresh P-256 key with a self-signed certificate naming the node. */
export function createTlsIdentity(nodeId: string): TlsIdentity {
  const key = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
  return {
    keyPem: key.export({ type: "pkcs8", format: "pem" }).toString(),
    certPem: createSelfSignedCertificate(key, nodeId).pem,
    keySha256: spkiSha256(key),
  };
}

/** The identity of a key and certificate the caller gives (PEM). */
export function tlsIdentityOf(keyPem: string, certPem: string): TlsIdentity {
  return { keyPem, certPem, keySha256: spkiSha256(createPrivateKey(keyPem)) };
}
