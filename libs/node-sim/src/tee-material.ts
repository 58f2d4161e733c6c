// Test TEE material kept in a directory, so that several simulator processes and the
// attestation service of a dev stack share one synthetic root. Never Intel's root.
import { createPrivateKey, randomUUID } from "node:crypto";
import { link, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createTestCollateral, createTestPki } from "@zml/tdx/testing";
import type { TestCert, TestPki } from "@zml/tdx/testing";
import type { SimTeeSigner } from "./types.ts";

/** What {@link loadTestTeeMaterial} returns. */
export interface TestTeeMaterial {
  signer: SimTeeSigner;
  /** Test collateral valid from an hour before `now` to 30 days after. */
  collateral: Record<string, string>;
  /** PEM of the synthetic root: the attestation service's trust anchor in dev. */
  rootPem: string;
  /** `<dir>/root.pem`, for `ATTESTATION_TRUST_ROOT_PEM_FILE`. */
  rootPemFile: string;
}

interface StoredCert {
  pem: string;
  key_pem: string;
  serial: string;
}

const PKI_FILE = "test-pki.json";
const ROOT_FILE = "root.pem";
const HOUR_MS = 3_600_000;

function store(cert: TestCert): StoredCert {
  return {
    pem: cert.pem,
    key_pem: cert.key.export({ format: "pem", type: "pkcs8" }).toString(),
    serial: cert.serial,
  };
}

function restore(cert: StoredCert): TestCert {
  return { pem: cert.pem, key: createPrivateKey(cert.key_pem), serial: cert.serial };
}

async function readPki(path: string): Promise<TestPki | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  const stored = JSON.parse(text) as Record<
    "root" | "platformCa" | "pck" | "tcbSigning",
    StoredCert
  >;
  const pki = {
    root: restore(stored.root),
    platformCa: restore(stored.platformCa),
    pck: restore(stored.pck),
    tcbSigning: restore(stored.tcbSigning),
  };
  return { ...pki, pckChainPem: pki.pck.pem + pki.platformCa.pem + pki.root.pem };
}

/**
 * Loads the synthetic test PKI kept in `dir`, creating it on first use (the private keys
 * are written to `test-pki.json`, mode 0600: test material only), and writes `root.pem`.
 * Safe when several processes start at once: the first complete file wins.
 */
export async function loadTestTeeMaterial(dir: string, now = new Date()): Promise<TestTeeMaterial> {
  await mkdir(dir, { recursive: true });
  const path = join(dir, PKI_FILE);
  let pki = await readPki(path);
  if (pki === undefined) {
    const fresh = createTestPki();
    const tmp = `${path}.${randomUUID()}.tmp`;
    const content = JSON.stringify({
      root: store(fresh.root),
      platformCa: store(fresh.platformCa),
      pck: store(fresh.pck),
      tcbSigning: store(fresh.tcbSigning),
    });
    await writeFile(tmp, content, { mode: 0o600 });
    // link() fails if another process got there first; its file is then the one to use.
    await link(tmp, path).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "EEXIST") throw error;
    });
    await rm(tmp, { force: true });
    pki = (await readPki(path))!;
  }
  const rootPemFile = join(dir, ROOT_FILE);
  const tmpRoot = `${rootPemFile}.${randomUUID()}.tmp`;
  await writeFile(tmpRoot, pki.root.pem);
  await rename(tmpRoot, rootPemFile);
  const collateral = createTestCollateral({
    pki,
    issueDate: new Date(now.getTime() - HOUR_MS),
    nextUpdate: new Date(now.getTime() + 30 * 24 * HOUR_MS),
  });
  return {
    signer: { pckChainPem: pki.pckChainPem, pckKey: pki.pck.key },
    collateral: { ...collateral },
    rootPem: pki.root.pem,
    rootPemFile,
  };
}
