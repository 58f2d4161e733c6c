import { spawn } from "node:child_process";
import { createPublicKey } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { NodeQuoteResponseSchema } from "@zml/contracts";
import type { NodeQuoteResponse } from "@zml/contracts";
import { INTEL_SGX_ROOT_CA_PEM, reportDataFor, spkiSha256, verifyQuote } from "@zml/tdx";
import type { Collateral } from "@zml/tdx";
import { createTestTee, TEST_MRTD, TEST_RTMR3 } from "@zml/tdx/testing";
import { describe, expect, it } from "vitest";
import { loadTestTeeMaterial, SimInputError, startSimNode } from "../src/index.ts";
import type { SimNodeOptions, SimTeeOptions } from "../src/index.ts";
import { CHAT_BODY, tlsRequest } from "./helpers.ts";

const testTee = createTestTee();
const { pki } = testTee;
const MRTD = TEST_MRTD;
const RTMR3 = TEST_RTMR3;

function teeNode(tee: Partial<SimTeeOptions> = {}, extra: Partial<SimNodeOptions> = {}) {
  return startSimNode({
    nodeId: "tee-a",
    flavour: "vllm",
    models: ["llama-3-8b"],
    tee: testTee.nodeTee({ rtmr3: RTMR3, ...tee }),
    ...extra,
  });
}

const nonce = (byte: string) => byte.repeat(32);

/** A quote, and the TLS key hash the node presented on the connection that served it. */
async function getQuote(
  url: string,
  nonceHex: string,
  query = "",
): Promise<NodeQuoteResponse & { tlsKeySha256: string }> {
  const res = await tlsRequest(`${url}/attestation/quote?nonce=${nonceHex}${query}`);
  expect(res.status).toBe(200);
  return {
    ...NodeQuoteResponseSchema.parse(JSON.parse(res.text)),
    tlsKeySha256: res.peerKeySha256,
  };
}

function verify(
  answer: NodeQuoteResponse,
  nonceHex: string,
  tlsKeySha256: string,
  root = pki.root.pem,
  sessionKeySha256?: string,
) {
  return verifyQuote({
    quote: answer.quote_b64,
    collateral: answer.collateral as unknown as Collateral,
    at: new Date(),
    trustedRootPem: root,
    policy: {
      approvedMeasurements: [{ mrtd: MRTD, rtmr3: RTMR3 }],
      expectedReportData: reportDataFor({ nonce: nonceHex, tlsKeySha256, sessionKeySha256 }),
      requireCollateral: true,
    },
  });
}

const failedChecks = (r: { checks: { name: string; ok: boolean }[] }) =>
  r.checks.filter((c) => !c.ok).map((c) => c.name);

describe("TEE mode", () => {
  it("serves v4 quotes over TLS, bound to the nonce and the TLS key, that verify against the test root only", async () => {
    await using node = await teeNode();
    expect(node.url).toMatch(/^https:/);
    const answer = await getQuote(node.url, nonce("5a"));
    const key = answer.tlsKeySha256;
    expect(node.stats().tls_key_sha256).toBe(key);
    const result = verify(answer, nonce("5a"), key);
    expect(failedChecks(result)).toEqual([]);
    expect(result.fields).toMatchObject({ version: 4, mrtd: MRTD, rtmr3: RTMR3 });
    expect(result.fields?.reportdata).toBe(
      reportDataFor({ nonce: nonce("5a"), tlsKeySha256: key }),
    );
    expect(result.tcbStatus).toBe("UpToDate");
    expect(failedChecks(verify(answer, nonce("5a"), key, INTEL_SGX_ROOT_CA_PEM))).toContain(
      "pck_chain",
    );
    const second = await getQuote(node.url, nonce("6b"));
    expect(failedChecks(verify(second, nonce("6b"), key))).toEqual([]);
    expect(failedChecks(verify(second, nonce("5a"), key))).toEqual(["report_data"]);
    expect(failedChecks(verify(second, nonce("6b"), "cc".repeat(32)))).toEqual(["report_data"]);
    expect(node.stats().quotes_served).toBe(2);
  });

  it("swaps its TLS key on key_swap while its quotes keep binding the TD's key", async () => {
    await using node = await teeNode();
    const before = await getQuote(node.url, nonce("01"));
    await tlsRequest(`${node.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify(CHAT_BODY),
    });
    node.setFault({ kind: "key_swap" });
    expect(node.fault()).toBeNull();
    const after = await getQuote(node.url, nonce("02"));
    expect(after.tlsKeySha256).not.toBe(before.tlsKeySha256);
    expect(node.stats().tls_key_sha256).toBe(after.tlsKeySha256);
    // The quote still binds the key made inside the TD, not the one now served.
    expect(failedChecks(verify(after, nonce("02"), before.tlsKeySha256))).toEqual([]);
    expect(failedChecks(verify(after, nonce("02"), after.tlsKeySha256))).toEqual(["report_data"]);
    await tlsRequest(`${node.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify(CHAT_BODY),
    });
    expect(node.stats().payloads_by_tls_key).toEqual({
      [before.tlsKeySha256]: 1,
      [after.tlsKeySha256]: 1,
    });
  });

  it("passes off another node's quotes under the relay fault, bound to that node's key", async () => {
    await using tee = await teeNode();
    await using relay = await startSimNode({
      nodeId: "relay",
      flavour: "vllm",
      models: ["m"],
      tls: true,
    });
    expect(relay.url).toMatch(/^https:/);
    relay.setFault({ kind: "relay", target: tee.url });
    const answer = await getQuote(relay.url, nonce("0a"));
    expect(answer.tlsKeySha256).toBe(relay.stats().tls_key_sha256);
    // A genuine quote for the nonce, but for the TEE node's key, not the relay's.
    expect(failedChecks(verify(answer, nonce("0a"), tee.stats().tls_key_sha256!))).toEqual([]);
    expect(failedChecks(verify(answer, nonce("0a"), answer.tlsKeySha256))).toEqual(["report_data"]);
    expect(tee.stats().quotes_served).toBe(1);
    expect(() => relay.setFault({ kind: "relay", target: "ftp://x" } as never)).toThrow(
      SimInputError,
    );
  });

  it("binds a fresh ephemeral X25519 session key into REPORTDATA when asked", async () => {
    await using node = await teeNode();
    const ask = (n: string) => getQuote(node.url, n, "&session_key=1");
    const answer = await ask(nonce("5a"));
    const tls = answer.tlsKeySha256;
    const der = Buffer.from(answer.session_public_key!, "base64");
    const key = createPublicKey({ key: der, format: "der", type: "spki" });
    expect(key.asymmetricKeyType).toBe("x25519");
    const session = spkiSha256(der);
    const result = verify(answer, nonce("5a"), tls, pki.root.pem, session);
    expect(failedChecks(result)).toEqual([]);
    expect(result.fields?.reportdata).toBe(
      reportDataFor({ nonce: nonce("5a"), tlsKeySha256: tls, sessionKeySha256: session }),
    );
    // Without the binding the same quote does not verify; each request gets a new key.
    expect(failedChecks(verify(answer, nonce("5a"), tls))).toEqual(["report_data"]);
    expect((await ask(nonce("5a"))).session_public_key).not.toBe(answer.session_public_key);
    expect((await getQuote(node.url, nonce("5a"))).session_public_key).toBeUndefined();
  });

  it("marks a debug TD as such", async () => {
    await using node = await teeNode({ debug: true });
    const answer = await getQuote(node.url, nonce("01"));
    expect(failedChecks(verify(answer, nonce("01"), answer.tlsKeySha256))).toEqual(["td_debug"]);
  });

  it("replays its first quote when told to, whatever the nonce", async () => {
    await using node = await teeNode({ replayQuote: true });
    const first = await getQuote(node.url, nonce("01"));
    const again = await getQuote(node.url, nonce("02"));
    expect(again.quote_b64).toBe(first.quote_b64);
    expect(failedChecks(verify(again, nonce("02"), again.tlsKeySha256))).toEqual(["report_data"]);
  });

  it("rejects a missing or malformed nonce and never counts quotes as payloads", async () => {
    await using node = await teeNode({ collateral: undefined });
    for (const query of ["", "?nonce=abc", `?nonce=${"zz".repeat(32)}`]) {
      const res = await tlsRequest(`${node.url}/attestation/quote${query}`);
      expect(res.status).toBe(400);
      expect((JSON.parse(res.text) as { error: { code: string } }).error.code).toBe(
        "invalid_nonce",
      );
    }
    const answer = await getQuote(node.url, nonce("0c"));
    expect(answer.collateral).toBeUndefined();
    expect((await tlsRequest(`${node.url}/attestation/quote`, { method: "POST" })).status).toBe(
      405,
    );
    expect(node.stats()).toMatchObject({ payloads_received: 0, quotes_served: 1 });
    await tlsRequest(`${node.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify(CHAT_BODY),
    });
    expect(node.stats().payloads_received).toBe(1);
  });

  it("has no quote endpoint outside TEE mode", async () => {
    await using node = await startSimNode({ nodeId: "n", flavour: "vllm", models: ["m"] });
    expect((await fetch(`${node.url}/attestation/quote?nonce=${nonce("01")}`)).status).toBe(404);
    expect(node.stats()).not.toHaveProperty("quotes_served");
    expect(node.stats()).not.toHaveProperty("tls_key_sha256");
    expect(() => node.setFault({ kind: "key_swap" })).toThrow(SimInputError);
  });

  it("rejects bad TEE options", async () => {
    await expect(teeNode({ mrtd: "abc" })).rejects.toMatchObject({
      code: "invalid_options",
      field: "options.tee.mrtd",
    });
    await expect(teeNode({ rtmr1: "00" })).rejects.toBeInstanceOf(SimInputError);
  });
});

describe("test TEE material on disk", () => {
  it("is created once and shared, with the root written for the attestation service", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-tee-"));
    try {
      const [a, b] = await Promise.all([loadTestTeeMaterial(dir), loadTestTeeMaterial(dir)]);
      expect(a.rootPem).toBe(b.rootPem);
      expect(await readFile(a.rootPemFile, "utf8")).toBe(a.rootPem);
      expect((await stat(join(dir, "test-pki.json"))).mode & 0o077).toBe(0);
      const later = await loadTestTeeMaterial(dir);
      expect(later.signer.pckChainPem).toBe(a.signer.pckChainPem);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("runs from the CLI with --tee-dir", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-tee-"));
    const cli = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
    const args = ["--id", "tee-cli", "--model", "m", "--tee-dir", dir, "--mrtd", MRTD];
    const child = spawn(process.execPath, [cli, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    try {
      const [line] = (await once(createInterface({ input: child.stdout }), "line")) as [string];
      const ready = JSON.parse(line) as { url: string; tee_root_pem_file: string };
      const root = await readFile(ready.tee_root_pem_file, "utf8");
      const answer = await getQuote(ready.url, nonce("77"));
      const result = verify(answer, nonce("77"), answer.tlsKeySha256, root);
      expect(failedChecks(result)).toEqual(["measurements"]); // no RTMR3 given on the CLI
    } finally {
      child.kill("SIGTERM");
      await once(child, "exit");
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses TEE flags without --tee-dir", async () => {
    const cli = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
    const child = spawn(process.execPath, [cli, "--id", "x", "--model", "m", "--mrtd", MRTD]);
    const [code] = (await once(child, "exit")) as [number];
    expect(code).toBe(2);
  });
});
