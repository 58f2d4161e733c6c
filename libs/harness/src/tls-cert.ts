import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestCertificate {
  cert: Buffer;
  key: Buffer;
  certPath: string;
  keyPath: string;
  dispose(): void;
}

/**
 * A throw-away self-signed P-256 certificate for `localhost` / 127.0.0.1, made with the
 * `openssl` CLI (node:crypto cannot issue X.509 certificates), for TLS tests only.
 */
export function createTestCertificate(): TestCertificate {
  const dir = mkdtempSync(join(tmpdir(), "zml-tls-"));
  const keyPath = join(dir, "key.pem");
  const certPath = join(dir, "cert.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      keyPath,
      "-out",
      certPath,
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ],
    { stdio: "ignore" },
  );
  return {
    cert: readFileSync(certPath),
    key: readFileSync(keyPath),
    certPath,
    keyPath,
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}
