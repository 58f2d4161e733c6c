import { openKv } from "@zml/bus";
import { KV_BUCKETS, RevocationSchema } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import {
  MRTD,
  ROGUE_MRTD,
  approveMeasurements,
  teeNode,
  verifyNode,
  waitForResult,
  pki,
} from "./attestation-fixtures.ts";

let stack: Stack;
const payloads = (id: string) => stack.sims.get(id)!.stats().payloads_received;
const UNTRUSTED = ["t3-rogue", "t3-debug", "t3-replay", "t1-plain"];

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      teeNode("t3-a"),
      teeNode("t3-b"),
      teeNode("t3-rogue", { mrtd: ROGUE_MRTD }),
      teeNode("t3-debug", { debug: true }),
      teeNode("t3-replay", { replayQuote: true }),
      { nodeId: "t1-plain", family: "H100", tier: 1 },
    ],
    allowedTiers: [1, 3],
    dispatchers: 2,
    trustedRootPem: pki.root.pem,
    seed: (bus) => approveMeasurements(bus, [{ id: "approved-1", mrtd: MRTD }]),
  });
  for (const id of ["t3-a", "t3-b"]) await waitForResult(stack, id, (r) => r.ok, "attested");
  for (const id of ["t3-rogue", "t3-debug"]) {
    await waitForResult(stack, id, (r) => !r.ok, "attestation failed");
  }
  // A replaying node's first quote is genuinely fresh; its next attestation replays it.
  await waitForResult(stack, "t3-replay", (r) => r.ok, "first quote accepted");
  await verifyNode(stack, { node_id: "t3-replay", fresh: true });
  await waitForResult(stack, "t3-replay", (r) => !r.ok, "replayed quote rejected");
});
afterAll(async () => {
  await stack?.stop();
});

const tier3 = () => postChat(stack.intakeUrl, chat(MODEL, { tier: 3 }));

async function revoke(id: string, nodeId: string): Promise<number> {
  const kv = await openKv(stack.bus, KV_BUCKETS.revocations);
  const entry = RevocationSchema.parse({
    id,
    reason: "e2e: published vulnerability",
    node_id: nodeId,
    revoked_at: Date.now(),
  });
  const at = performance.now();
  await kv.put(id, JSON.stringify(entry));
  return at;
}

describe("tier 3 routing", () => {
  it("reaches only attested tier-3 nodes; unattested, debug and replaying nodes never see a payload", async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const res = await tier3();
      expect(res.status).toBe(200);
      expect(res.routing?.tier).toBe(3);
      seen.add(res.routing!.node);
    }
    expect([...seen].every((n) => n === "t3-a" || n === "t3-b")).toBe(true);
    for (const id of UNTRUSTED) expect(payloads(id), id).toBe(0);
  });

  it("excludes a revoked node from the next decisions of every dispatcher", async () => {
    const startedAt = await revoke("rev-a", "t3-a");
    // Both dispatcher replicas answer in turn; 20 consecutive requests without t3-a means
    // every replica excludes it.
    let excludedAt = 0;
    let streak = 0;
    await pollUntil(
      async () => {
        const res = await tier3();
        if (res.status === 200 && res.routing?.node === "t3-b") {
          if (streak === 0) excludedAt = performance.now();
          streak++;
        } else streak = 0;
        return streak >= 20;
      },
      { timeoutMs: 15_000, intervalMs: 0, message: "t3-a excluded by every dispatcher" },
    );
    const before = payloads("t3-a");
    for (let i = 0; i < 10; i++) expect((await tier3()).routing?.node).toBe("t3-b");
    expect(payloads("t3-a")).toBe(before);
    process.stdout.write(
      `revocation propagation (admin write → every dispatcher excludes the node): ${(excludedAt - startedAt).toFixed(1)} ms\n`,
    );
  });

  it("has a restarted dispatcher honour a revocation made while it was down", async () => {
    await stack.stopService("dispatcher-2");
    await stack.stopService("dispatcher");
    await revoke("rev-b", "t3-b");
    await stack.startService("dispatcher");
    const before = payloads("t3-b");
    for (let i = 0; i < 5; i++) {
      const res = await tier3();
      expect(res.status).toBe(503);
      expect(JSON.parse(res.text).error.code, res.text).toBe("no_usable_node");
    }
    expect(payloads("t3-b")).toBe(before);
    for (const id of UNTRUSTED) expect(payloads(id), id).toBe(0);
  });
});
