// Revocations end to end: an admin write to the `zml_revocations` bucket invalidates
// matching attestations at once — in every consumer's memory view and in the published
// results — and a restarted attestation service honours revocations made while it was down.
import { performance } from "node:perf_hooks";
import { connectBus, encodeJson, openKv, watchKvIntoMap } from "@zml/bus";
import type { Bus, KvMap } from "@zml/bus";
import {
  ATTESTATION_RESULTS_BUCKET,
  AttestationResultSchema,
  isAttestationUsable,
  KV_BUCKETS,
  RevocationSchema,
} from "@zml/contracts";
import type { AttestationResult, Revocation } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL, quietLog, startStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import {
  approveMeasurements,
  MRTD,
  MRTD_2,
  readResult,
  resultOf,
  teeNode,
  verifyNode,
  waitForResult,
  pki,
} from "./attestation-fixtures.ts";

/**
 * What a dispatcher keeps in memory: both buckets mirrored, decided with
 * `isAttestationUsable`. Notes when each node first became unusable.
 */
interface View {
  bus: Bus;
  results: KvMap<AttestationResult>;
  revocations: KvMap<Revocation>;
  excludedAt: Map<string, number>;
  /** When the published result of each node first said `revoked`. */
  revokedResultAt: Map<string, number>;
  /** Every result published, in order. */
  history: AttestationResult[];
  usable(nodeId: string): boolean;
  stop(): Promise<void>;
}

async function openView(stack: Stack, name: string): Promise<View> {
  const bus = await connectBus({ ...stack.nats.client(), name, log: quietLog });
  const excludedAt = new Map<string, number>();
  const revokedResultAt = new Map<string, number>();
  const history: AttestationResult[] = [];
  // Filled once both watches are loaded; changes before that are covered by the first check.
  const ready: { view?: View } = {};
  const check = () => {
    const view = ready.view;
    if (!view) return;
    const now = performance.now();
    for (const [id, result] of view.results.map) {
      if (view.usable(id)) excludedAt.delete(id);
      else if (!excludedAt.has(id)) excludedAt.set(id, now);
      if (result.reason_code !== "revoked") revokedResultAt.delete(id);
      else if (!revokedResultAt.has(id)) revokedResultAt.set(id, now);
    }
  };
  const results = await watchKvIntoMap(bus, await openKv(bus, ATTESTATION_RESULTS_BUCKET), {
    schema: AttestationResultSchema,
    log: quietLog,
    onChange: (_key, value) => {
      if (value) history.push(value);
      check();
    },
  });
  const revocations = await watchKvIntoMap(bus, await openKv(bus, KV_BUCKETS.revocations), {
    schema: RevocationSchema,
    log: quietLog,
    onChange: check,
  });
  const view: View = {
    bus,
    results,
    revocations,
    excludedAt,
    revokedResultAt,
    history,
    usable: (id) =>
      isAttestationUsable(results.map.get(id), revocations.map.values(), Date.now(), MODEL),
    async stop() {
      results.stop();
      revocations.stop();
      await bus.drain();
    },
  };
  ready.view = view;
  check();
  return view;
}

let stack: Stack;
const views: View[] = [];

beforeAll(async () => {
  stack = await startStack({
    nodes: [teeNode("tee-a"), teeNode("tee-b"), teeNode("tee-c", { mrtd: MRTD_2 })],
    trustedRootPem: pki.root.pem,
    seed: (bus) =>
      approveMeasurements(bus, [
        { id: "llama-t3", mrtd: MRTD },
        { id: "llama-t3-v2", mrtd: MRTD_2 },
      ]),
  });
  for (const id of ["tee-a", "tee-b", "tee-c"]) {
    await waitForResult(stack, id, (r) => r.ok, "attested ok");
  }
  for (let i = 1; i <= 3; i++) views.push(await openView(stack, `view-${i}`));
});

afterAll(async () => {
  await Promise.allSettled(views.map((v) => v.stop()));
  await stack?.stop();
});

async function revoke(fields: Partial<Revocation> & { id: string }): Promise<number> {
  const kv = await openKv(stack.bus, KV_BUCKETS.revocations);
  const entry = { reason: "vendor advisory", revoked_at: Date.now(), ...fields };
  const started = performance.now();
  await kv.put(fields.id, encodeJson(fields.id, RevocationSchema, entry));
  return started;
}

async function lift(id: string): Promise<void> {
  await (await openKv(stack.bus, KV_BUCKETS.revocations)).delete(id);
}

const revokedBy = (id: string) => (r: AttestationResult) =>
  !r.ok && r.reason_code === "revoked" && r.revocation?.id === id;

function report(line: string): void {
  process.stdout.write(`[attestation-revocation] ${line}\n`);
}

describe("revocation", () => {
  it("excludes a revoked node in every view and marks its result revoked", async () => {
    for (const v of views) expect(v.usable("tee-a")).toBe(true);
    const started = await revoke({ id: "r-node-a", node_id: "tee-a" });
    await pollUntil(
      () => views.every((v) => v.excludedAt.has("tee-a") && v.revokedResultAt.has("tee-a")),
      { timeoutMs: 10_000, message: "every view excludes tee-a and sees it revoked" },
    );
    const published = await waitForResult(stack, "tee-a", revokedBy("r-node-a"), "revoked");
    const ms = (at: number) => (at - started).toFixed(1);
    const excluded = views.map((v) => v.excludedAt.get("tee-a")!);
    const republished = views.map((v) => v.revokedResultAt.get("tee-a")!);
    report(
      `admin write → views exclude tee-a after ${excluded.map(ms).join(", ")} ms ` +
        `(last: ${ms(Math.max(...excluded))} ms); revoked result reaches them after ` +
        `${republished.map(ms).join(", ")} ms`,
    );
    expect(published.reason).toContain("vendor advisory");
    expect(published.measurement?.mrtd).toBe(MRTD);
    for (const v of views) expect(v.usable("tee-b")).toBe(true);
    expect(resultOf(await verifyNode(stack, { node_id: "tee-a" })).reason_code).toBe("revoked");
  });

  it("revokes every node with a revoked measurement, and lifting it restores them", async () => {
    await revoke({ id: "r-mrtd", mrtd: MRTD });
    await waitForResult(stack, "tee-b", revokedBy("r-mrtd"), "revoked by measurement");
    expect((await readResult(stack, "tee-c"))?.ok).toBe(true);
    for (const v of views) {
      expect(v.usable("tee-b")).toBe(false);
      expect(v.usable("tee-c")).toBe(true);
    }

    await lift("r-mrtd");
    const back = await waitForResult(stack, "tee-b", (r) => r.ok, "re-attested after lifting");
    expect(back.revocation).toBeNull();
    await pollUntil(() => views.every((v) => v.usable("tee-b")), { timeoutMs: 10_000 });
    // tee-a stays revoked by its own entry.
    expect((await readResult(stack, "tee-a"))?.reason_code).toBe("revoked");
    expect(resultOf(await verifyNode(stack, { node_id: "tee-a", fresh: true }))).toMatchObject({
      ok: false,
      reason_code: "revoked",
    });
  });

  it("is honoured by an attestation service that was down when it was made", async () => {
    await stack.stopService("attestation");
    await revoke({ id: "r-node-c", node_id: "tee-c" });
    // Consumers exclude the node straight from the revocation list…
    await pollUntil(() => views.every((v) => !v.usable("tee-c")), { timeoutMs: 10_000 });
    // …while the published result is still the stale one from before.
    expect((await readResult(stack, "tee-c"))?.ok).toBe(true);

    const before = views[0]!.history.length;
    await stack.startService("attestation");
    const r = await waitForResult(stack, "tee-c", revokedBy("r-node-c"), "revoked after restart");
    expect(r.ok).toBe(false);
    // Replayed before anything was published: the restarted service never vouched for tee-c.
    await pollUntil(() => views[0]!.history.length > before, { timeoutMs: 10_000 });
    const since = views[0]!.history.slice(before).filter((x) => x.node_id === "tee-c");
    expect(since.length).toBeGreaterThan(0);
    expect(since.every((x) => !x.ok && x.revocation?.id === "r-node-c")).toBe(true);
    expect(resultOf(await verifyNode(stack, { node_id: "tee-c", fresh: true }))).toMatchObject({
      reason_code: "revoked",
      revocation: { id: "r-node-c" },
    });
    expect(resultOf(await verifyNode(stack, { node_id: "tee-a", fresh: true })).reason_code).toBe(
      "revoked",
    );
    expect(resultOf(await verifyNode(stack, { node_id: "tee-b", fresh: true })).ok).toBe(true);
  });
});
