import { execFile } from "node:child_process";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { TlsFiles } from "./server-config.ts";

const run = promisify(execFile);

export interface LocalCa extends TlsFiles {
  dir: string;
}

/**
 * A local certificate authority and a server certificate it signs (P-256), made with the
 * `openssl` CLI because node:crypto cannot issue X.509 certificates. The server
 * certificate is valid for `hosts` (DNS names or IP addresses) and doubles as the route
 * certificate for mutual TLS between cluster peers. For dev stacks, tests and operators who
 * have no PKI of their own; rotate by generating a new directory and reloading the server.
 */
export async function createLocalCa(
  dir: string,
  options: { hosts: string[]; days?: number },
): Promise<LocalCa> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const caFile = join(dir, "ca.pem");
  const caKey = join(dir, "ca-key.pem");
  const keyFile = join(dir, "server-key.pem");
  const certFile = join(dir, "server.pem");
  const csr = join(dir, "server.csr");
  const ext = join(dir, "server.ext");
  const days = String(options.days ?? 365);
  const curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  await run("openssl", [
    "req",
    "-x509",
    ...curve,
    "-keyout",
    caKey,
    "-out",
    caFile,
    "-days",
    days,
    "-subj",
    "/CN=ZML local bus CA",
  ]);
  await run("openssl", ["req", ...curve, "-keyout", keyFile, "-out", csr, "-subj", "/CN=zml-nats"]);
  const san = options.hosts.map((h) => (/^[\d.]+$|:/.test(h) ? `IP:${h}` : `DNS:${h}`)).join(",");
  await writeFile(
    ext,
    `subjectAltName=${san}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n`,
  );
  await run("openssl", [
    "x509",
    "-req",
    "-in",
    csr,
    "-CA",
    caFile,
    "-CAkey",
    caKey,
    "-CAcreateserial",
    "-out",
    certFile,
    "-days",
    days,
    "-extfile",
    ext,
  ]);
  // Signing leftovers; ca-key.pem stays, to issue the next server certificate.
  await Promise.all([csr, ext, join(dir, "ca.srl")].map((f) => rm(f, { force: true })));
  return { dir, caFile, certFile, keyFile };
}
