import { startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { createTestTee, TEST_MRTD } from "@zml/tdx/testing";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fetchTlsKeySha256, verifyNodeAttestation } from "../src/index.ts";
import type { NodeAttestation } from "../src/index.ts";

const testTee = createTestTee();
const { pki, collateral } = testTee;
const MRTD = TEST_MRTD;
// The sims' certificates are self-signed: the quote, not a CA, vouches for their keys.
const insecure = new Agent({ connect: { rejectUnauthorized: false } });
let tee: SimNode;
let relay: SimNode;

beforeAll(async () => {
  tee = await startSimNode({
    nodeId: "tee-a",
    flavour: "vllm",
    models: ["m"],
    tee: testTee.nodeTee(),
  });
  relay = await startSimNode({ nodeId: "relay", flavour: "vllm", models: ["m"], tls: true });
  relay.setFault({ kind: "relay", target: tee.url });
});
afterAll(async () => {
  await tee?.close();
  await relay?.close();
  await insecure.close();
});

/** What the gateway would report for a node: its quote for `nonce` and the key it presented. */
async function attestationOf(node: SimNode, nonce: string): Promise<NodeAttestation> {
  const res = await request(`${node.url}/attestation/quote?nonce=${nonce}`, {
    dispatcher: insecure,
  });
  const { quote_b64 } = (await res.body.json()) as { quote_b64: string };
  return {
    node_id: node.nodeId,
    tier: 3,
    quote_b64,
    nonce_hex: nonce,
    tls_key_sha256: await fetchTlsKeySha256(node.url),
  };
}

const options = (nonce: string) => ({
  nonce,
  trustedRootPem: pki.root.pem,
  collateral,
  approvedMeasurements: [{ mrtd: MRTD }],
});

describe("verifyNodeAttestation", () => {
  it("passes a quote bound to your nonce and the key the node shows you", async () => {
    const nonce = "5a".repeat(32);
    const attestation = await attestationOf(tee, nonce);
    const observed = await fetchTlsKeySha256(tee.url);
    expect(observed).toBe(tee.stats().tls_key_sha256);
    const result = verifyNodeAttestation(attestation, {
      ...options(nonce),
      observedTlsKeySha256: observed,
    });
    expect(result.checks.filter((c) => !c.ok)).toEqual([]);
    expect(result).toMatchObject({ ok: true, reason: null, tlsKeySha256: observed });
  });

  it("fails another nonce, another TLS key, and a relayed quote", async () => {
    const nonce = "6b".repeat(32);
    const attestation = await attestationOf(tee, nonce);
    expect(verifyNodeAttestation(attestation, options("7c".repeat(32))).reason).toMatch(
      /^report_data|^nonce/,
    );
    const other = verifyNodeAttestation(attestation, {
      ...options(nonce),
      observedTlsKeySha256: "00".repeat(32),
    });
    expect(other).toMatchObject({ ok: false, reason: expect.stringMatching(/^tls_key/) });
    // The relay passes on a real, fresh quote, but it binds the TEE node's key, not the relay's.
    const relayed = verifyNodeAttestation(await attestationOf(relay, nonce), options(nonce));
    expect(relayed).toMatchObject({ ok: false, reason: expect.stringMatching(/^report_data/) });
    expect(verifyNodeAttestation({ ...attestation, tls_key_sha256: null }, options(nonce)).ok).toBe(
      false,
    );
  });

  it("refuses a non-https endpoint when reading a TLS key", async () => {
    await expect(fetchTlsKeySha256("http://127.0.0.1:1")).rejects.toThrow(/https/);
  });
});
