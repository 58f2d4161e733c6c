// Tiers 3–4: the attestation service attests simulated TDX nodes end to end — quotes in the
// real v4 layout fetched over TLS with a fresh nonce and bound to the node's TLS key,
// verified against the trust anchor
// (the test root, configured only here), results in the `zml_attestations` bucket.
import { decodeJson, natsConnectionOf } from "@zml/bus";
import { ATTESTATION_RESULT_ALL, AttestationResultSchema } from "@zml/contracts";
import type { AttestationResult } from "@zml/contracts";
import { parseQuote, reportDataFor, verifyQuote } from "@zml/tdx";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL, startStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import {
  approveMeasurements,
  collateral,
  MRTD,
  MRTD_2,
  pki,
  readResult,
  resultOf,
  ROGUE_MRTD,
  teeNode,
  verifyNode,
  waitForResult,
} from "./attestation-fixtures.ts";

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    nodes: [
      teeNode("tee-good"),
      teeNode("tee-rogue", { mrtd: ROGUE_MRTD }),
      teeNode("tee-debug", { debug: true }),
      teeNode("tee-replay", { replayQuote: true }),
      teeNode("tee-t4", { mrtd: MRTD_2 }, 4),
      { nodeId: "plain", family: "H100" },
    ],
    trustedRootPem: pki.root.pem,
    env: { ATTESTATION_RETRY_MS: "1000" },
    seed: (bus) =>
      approveMeasurements(bus, [
        { id: "llama-t3", mrtd: MRTD },
        { id: "llama-t4", mrtd: MRTD_2, tier: 4 },
      ]),
  });
});

afterAll(async () => {
  await stack?.stop();
});

const passed = (r: AttestationResult) => r.ok;

describe("attestation of simulated TDX nodes", () => {
  it("passes a node with an approved measurement, with a quote anyone can re-verify", async () => {
    const r = await waitForResult(stack, "tee-good", passed, "attested ok");
    expect(r).toMatchObject({
      tier: 3,
      reason_code: null,
      approved_models: [MODEL],
      tcb_status: "UpToDate",
      fmspc: "30606a000000",
      pck_serial: pki.pck.serial.toLowerCase(),
      measurement: { mrtd: MRTD },
      revocation: null,
      endpoint: stack.sims.get("tee-good")!.url,
      // The key the node serves TLS with, made inside its TD.
      tls_key_sha256: stack.sims.get("tee-good")!.stats().tls_key_sha256,
    });
    expect(r.expires_at).toBeGreaterThan(r.verified_at);
    // The quote binds the service's nonce and the node's TLS key, and verifies independently.
    const bound = reportDataFor({ nonce: r.nonce_hex!, tlsKeySha256: r.tls_key_sha256! });
    expect(parseQuote(r.quote_b64!).body.reportdata).toBe(bound);
    const independent = verifyQuote({
      quote: r.quote_b64!,
      collateral: collateral,
      at: new Date(),
      trustedRootPem: pki.root.pem,
      policy: { expectedReportData: bound },
    });
    expect(independent.ok).toBe(true);
    // Attestation never sends a payload.
    expect(stack.sims.get("tee-good")!.stats().payloads_received).toBe(0);
    expect(stack.sims.get("tee-good")!.stats().quotes_served).toBeGreaterThan(0);
  });

  it("passes a tier 4 node against its tier's approvals", async () => {
    const r = await waitForResult(stack, "tee-t4", passed, "attested ok");
    expect(r).toMatchObject({ tier: 4, approved_models: [MODEL] });
  });

  it("fails a node whose measurement is not approved", async () => {
    const r = await waitForResult(stack, "tee-rogue", (x) => !x.ok, "a failure");
    expect(r.reason_code).toBe("measurements");
    expect(r.reason).toContain(ROGUE_MRTD);
    expect(r.approved_models).toEqual([]);
  });

  it("fails a debug TD", async () => {
    const r = await waitForResult(stack, "tee-debug", (x) => !x.ok, "a failure");
    expect(r.reason_code).toBe("td_debug");
  });

  it("fails a replayed quote: the first one passes, the same quote again does not", async () => {
    const first = await waitForResult(stack, "tee-replay", passed, "first quote accepted");
    const replayed = resultOf(await verifyNode(stack, { node_id: "tee-replay", fresh: true }));
    expect(replayed).toMatchObject({ ok: false, reason_code: "report_data" });
    expect(replayed.quote_b64).toBe(first.quote_b64);
    expect(replayed.nonce_hex).not.toBe(first.nonce_hex);
    const stored = await waitForResult(stack, "tee-replay", (x) => !x.ok, "failure published");
    expect(stored.reason_code).toBe("report_data");
  });

  it("attests with a caller's nonce, and answers from the cache otherwise", async () => {
    const stored = await waitForResult(stack, "tee-good", passed, "attested ok");
    const cached = resultOf(await verifyNode(stack, { node_id: "tee-good" }));
    expect(cached.verified_at).toBe(stored.verified_at);

    const nonce = "c0".repeat(32);
    const mine = resultOf(await verifyNode(stack, { node_id: "tee-good", nonce }));
    expect(mine).toMatchObject({ ok: true, nonce_hex: nonce });
    expect(parseQuote(mine.quote_b64!).body.reportdata).toBe(
      reportDataFor({ nonce, tlsKeySha256: mine.tls_key_sha256! }),
    );
    expect((await readResult(stack, "tee-good"))?.nonce_hex).not.toBe(nonce); // not cached
  });

  it("broadcasts fresh results", async () => {
    const seen: AttestationResult[] = [];
    const sub = natsConnectionOf(stack.bus).subscribe(ATTESTATION_RESULT_ALL, {
      callback: (_err, msg) => {
        seen.push(decodeJson(msg.subject, AttestationResultSchema, msg.data));
      },
    });
    await natsConnectionOf(stack.bus).flush();
    const fresh = resultOf(await verifyNode(stack, { node_id: "tee-good", fresh: true }));
    await natsConnectionOf(stack.bus).flush();
    sub.unsubscribe();
    expect(seen.map((r) => r.nonce_hex)).toContain(fresh.nonce_hex);
  });

  it("answers errors for unknown, non-TEE and malformed requests", async () => {
    expect(await verifyNode(stack, { node_id: "nope" })).toMatchObject({
      error: { code: "unknown_node" },
    });
    expect(await verifyNode(stack, { node_id: "plain" })).toMatchObject({
      error: { code: "not_tee_node" },
    });
    expect(await readResult(stack, "plain")).toBeUndefined();
    const reply = await natsConnectionOf(stack.bus).request(
      "zml.attestation.verify",
      '{"node_id":"x"}',
      {
        timeout: 10_000,
      },
    );
    expect(JSON.parse(reply.string())).toMatchObject({ error: { code: "invalid_request" } });
  });
});
