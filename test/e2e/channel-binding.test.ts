// Tiers 3–4: an attestation holds only for the channel the attested TD terminates — its TLS
// key, at its endpoint. A relay that passes on a real TD's quotes, a node whose TLS key is
// swapped after attestation, and a node moved to a new endpoint get no payload until a
// quote binds what the dispatchers actually connect to. Counted at the simulated nodes.
import { pollUntil } from "@zml/harness";
import { startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { MODEL, nodeSpec, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { MRTD, approveMeasurements, teeNode, waitForResult, pki } from "./attestation-fixtures.ts";

let stack: Stack;
const sim = (id: string) => stack.sims.get(id)!;
const TRUSTED = ["t3-a", "t3-b", "t3-c"];

beforeAll(async () => {
  stack = await startStack({
    nodes: [
      teeNode("t3-a"),
      // Its own family, so requests can prefer it with an accelerator hint.
      { ...teeNode("t3-b"), family: "MI300X" },
      teeNode("t3-c"),
      // A plain server with a TLS key of its own, no TD: it passes on t3-a's quotes.
      { nodeId: "t3-relay", family: "H100", tier: 3, tls: true },
    ],
    allowedTiers: [3],
    dispatchers: 2,
    trustedRootPem: pki.root.pem,
    env: { ATTESTATION_RETRY_MS: "500" },
    seed: async (bus, sims) => {
      sims.get("t3-relay")!.setFault({ kind: "relay", target: sims.get("t3-a")!.url });
      await approveMeasurements(bus, [{ id: "approved-1", mrtd: MRTD }]);
    },
  });
  await waitForStatus(stack, "Active");
  for (const id of TRUSTED) await waitForResult(stack, id, (r) => r.ok, "attested");
});
afterAll(async () => {
  await stack?.stop();
});

/** Sends `n` tier-3 requests; each must succeed. Returns the nodes that served them. */
async function sendTier3(n: number, hint?: string): Promise<string[]> {
  const served: string[] = [];
  for (let i = 0; i < n; i++) {
    const extra = hint === undefined ? {} : { accelerator_hint: hint };
    const res = await postChat(stack.intakeUrl, chat(MODEL, { tier: 3, ...extra }));
    expect(res.status, res.text).toBe(200);
    served.push(res.routing!.node);
  }
  return served;
}

describe("channel binding", () => {
  it("never attests a relay passing on a real TD's quote, and the relay gets 0 tier-3 payloads", async () => {
    const relayed = await waitForResult(stack, "t3-relay", (r) => !r.ok, "relay refused");
    // The quote is genuine and fresh, but binds t3-a's TLS key, not the relay's.
    expect(relayed).toMatchObject({ reason_code: "report_data", tls_key_sha256: null });
    expect(sim("t3-relay").stats().quotes_served).toBeUndefined();
    const served = await sendTier3(30, "GB200");
    expect(served.every((n) => TRUSTED.includes(n))).toBe(true);
    expect(sim("t3-relay").stats().payloads_received).toBe(0);
  });

  it("sends nothing on a swapped TLS key and re-attests the node", async () => {
    const node = sim("t3-b");
    const attested = node.stats().tls_key_sha256!;
    const before = await waitForResult(stack, "t3-b", (r) => r.ok, "attested");
    expect(before.tls_key_sha256).toBe(attested);
    // Requests prefer t3-b's family: both dispatchers hold connections to the attested key.
    const preferred = await sendTier3(10, "MI300X");
    expect(preferred.every((n) => n === "t3-b")).toBe(true);
    const onAttestedKey = node.stats().payloads_by_tls_key?.[attested] ?? 0;
    expect(onAttestedKey).toBeGreaterThanOrEqual(10);
    const swappedAt = Date.now();
    node.setFault({ kind: "key_swap" });
    const swapped = node.stats().tls_key_sha256!;
    expect(swapped).not.toBe(attested);

    // Every request still succeeds, elsewhere; the node sees none on the new key.
    const after = await sendTier3(30, "MI300X");
    expect(after.every((n) => n !== "t3-b")).toBe(true);
    const reattested = await waitForResult(
      stack,
      "t3-b",
      (r) => r.verified_at >= swappedAt,
      "re-attested after the swap",
    );
    // The TD's quote still binds its own key, which the node no longer presents.
    expect(reattested).toMatchObject({ ok: false, reason_code: "report_data" });
    await sendTier3(10, "MI300X");
    expect(node.stats().payloads_by_tls_key?.[swapped] ?? 0).toBe(0);
    expect(node.stats().payloads_by_tls_key?.[attested]).toBe(onAttestedKey);
    await vi.waitFor(() =>
      expect(stack.logs()).toMatch(/TLS key differs from the attested one; re-attesting/),
    );
  });

  it("sends nothing to a node's new endpoint until it is attested there", async () => {
    await using moved: SimNode = await startSimNode({
      ...teeNode("t3-a"),
      flavour: "vllm",
      models: [MODEL],
    });
    // The new endpoint cannot serve a quote at first, so the window stays open.
    moved.setFault({ kind: "relay", target: "https://127.0.0.1:1" });
    const index = stack.fleet.nodes.findIndex((n) => n.id === "t3-a");
    // Its own family at the new endpoint, so requests can prefer it with a hint.
    const spec = nodeSpec(moved, { ...teeNode("t3-a"), family: "GB200" }, index);
    const changedAt = Date.now();
    await stack.apply({
      ...stack.fleet,
      nodes: stack.fleet.nodes.map((n) => (n.id === "t3-a" ? spec : n)),
    });
    const served = await sendTier3(30, "GB200");
    const failing = await waitForResult(
      stack,
      "t3-a",
      (r) => r.endpoint === moved.url && r.verified_at >= changedAt,
      "attested at the new endpoint",
    );
    expect(failing.ok).toBe(false);
    served.push(...(await sendTier3(10, "GB200")));
    expect(served.every((n) => n === "t3-c" || n === "t3-a")).toBe(true);
    expect(moved.stats().payloads_received).toBe(0);

    // Once its quote can be fetched there, it is attested there and gets traffic again.
    moved.setFault(null);
    await waitForResult(stack, "t3-a", (r) => r.ok && r.endpoint === moved.url, "attested");
    await pollUntil(async () => (await sendTier3(1, "GB200")).includes("t3-a"), {
      timeoutMs: 15_000,
      intervalMs: 0,
      message: "t3-a served at its new endpoint",
    });
    expect(moved.stats().payloads_received).toBeGreaterThan(0);
    expect(moved.stats().payloads_by_tls_key).toEqual({
      [moved.stats().tls_key_sha256!]: moved.stats().payloads_received,
    });
  });
});
