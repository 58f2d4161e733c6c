import { AttestationResultSchema, NodeSpecSchema } from "@zml/contracts";
import type { AttestationResult, NodeSpec, Revocation } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createAttestationService } from "../src/attestation-service.ts";
import type { AttestationServiceDeps } from "../src/attestation-service.ts";
import type { TeeNode } from "../src/evaluate.ts";
import { failedResult } from "../src/evaluate.ts";
import { MODEL, MRTD, NOW, revocation } from "./fixtures.ts";

const TTL = 60_000;
const RETRY = 5_000;

function spec(id: string, tier = 3, endpoint = `https://${id}.test:8000`): NodeSpec {
  return NodeSpecSchema.parse({
    id,
    endpoint,
    framework: "vllm",
    accelerator_family: "H100",
    tier,
    models: [MODEL],
  });
}

function okResult(node: TeeNode, now: number, nonce: string, mrtd = MRTD): AttestationResult {
  return AttestationResultSchema.parse({
    ...failedResult(node, now, "x", "x", nonce),
    ok: true,
    reason_code: null,
    reason: null,
    measurement: {
      mrtd,
      rtmr0: "00".repeat(48),
      rtmr1: "00".repeat(48),
      rtmr2: "00".repeat(48),
      rtmr3: "00".repeat(48),
    },
    approved_models: [MODEL],
    pck_serial: "0abc",
    fmspc: "30606a000000",
    expires_at: now + TTL,
    tls_key_sha256: "7e".repeat(32),
  });
}

type Outcome = "ok" | "fail" | "unavailable";

/** A service whose ports are in-memory: attestations resolve when the test says so. */
function harness() {
  let now = NOW;
  let nonces = 0;
  const outcome = new Map<string, Outcome>();
  const pending: Array<{
    node: TeeNode;
    nonce: string;
    sessionKey: boolean;
    resolve: (r: AttestationResult) => void;
  }> = [];
  const published: AttestationResult[] = [];
  const unpublished: string[] = [];
  const timers: Array<{ fn: () => void; at: number; cancelled: boolean }> = [];
  const revocations = new Map<string, Revocation>();
  const deps: AttestationServiceDeps = {
    attest: (node, nonce, options = {}) =>
      new Promise((resolve) =>
        pending.push({ node, nonce, sessionKey: options.sessionKey === true, resolve }),
      ),
    newNonce: () => (nonces++).toString(16).padStart(64, "0"),
    publish: (r) => published.push(r),
    unpublish: (id) => unpublished.push(id),
    revocations: () => revocations.values(),
    now: () => now,
    schedule: (fn, delay) => {
      const timer = { fn, at: now + delay, cancelled: false };
      timers.push(timer);
      return () => (timer.cancelled = true);
    },
    ttlMs: TTL,
    retryMs: RETRY,
    log: { info() {}, warn() {} },
  };
  const service = createAttestationService(deps);
  const settle = async () => {
    while (pending.length > 0) {
      const p = pending.shift()!;
      const o = outcome.get(p.node.id) ?? "ok";
      p.resolve(
        o === "ok"
          ? okResult(p.node, now, p.nonce)
          : failedResult(
              p.node,
              now,
              o === "fail" ? "measurements" : "quote_unavailable",
              o,
              p.nonce,
            ),
      );
      await new Promise((r) => setImmediate(r));
    }
  };
  return {
    service,
    pending,
    published,
    unpublished,
    revocations,
    outcome,
    settle,
    latest: (id: string) => published.filter((r) => r.node_id === id).at(-1),
    /** Moves the clock and fires due timers. */
    advance(ms: number) {
      now += ms;
      for (const t of timers.filter((t) => !t.cancelled && t.at <= now)) {
        t.cancelled = true;
        t.fn();
      }
    },
    now: () => now,
  };
}

describe("attestation service", () => {
  it("attests tier 3/4 nodes only, at once, and drops nodes that leave", async () => {
    const h = harness();
    h.service.syncNodes(
      new Map([
        ["a", spec("a")],
        ["b", spec("b", 4)],
        ["c", spec("c", 1)],
      ]),
    );
    expect(h.pending.map((p) => p.node.id).sort()).toEqual(["a", "b"]);
    await h.settle();
    expect(h.latest("a")?.ok).toBe(true);
    expect(h.latest("b")?.tier).toBe(4);
    h.service.syncNodes(new Map([["b", spec("b", 4)]]));
    expect(h.unpublished).toEqual(["a"]);
    expect(h.service.result("a")).toBeUndefined();
  });

  it("re-attests in the background at half the lifetime, before expiry", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    await h.settle();
    h.advance(TTL / 2 - 1);
    expect(h.pending).toHaveLength(0);
    h.advance(1);
    expect(h.pending).toHaveLength(1);
    expect(h.pending[0]!.nonce).not.toBe(h.latest("a")!.nonce_hex); // a new nonce each time
    await h.settle();
    expect(h.published.filter((r) => r.node_id === "a")).toHaveLength(2);
  });

  it("answers verify from the cache while usable, and attests on demand otherwise", async () => {
    const h = harness();
    h.service.syncNodes(
      new Map([
        ["a", spec("a")],
        ["t1", spec("t1", 1)],
      ]),
    );
    await h.settle();
    const cached = await h.service.verify("a");
    expect("result" in cached && cached.result).toBe(h.latest("a"));
    expect(h.pending).toHaveLength(0);

    const fresh = h.service.verify("a", { fresh: true });
    const again = h.service.verify("a", { fresh: true });
    expect(h.pending).toHaveLength(1); // concurrent requests share one attestation
    await h.settle();
    const [r1, r2] = await Promise.all([fresh, again]);
    expect(r1).toEqual(r2);

    expect(await h.service.verify("nope")).toMatchObject({ error: { code: "unknown_node" } });
    expect(await h.service.verify("t1")).toMatchObject({ error: { code: "not_tee_node" } });
  });

  it("attests with a caller's nonce without caching or publishing", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    await h.settle();
    const count = h.published.length;
    const reply = h.service.verify("a", { nonce: "ee".repeat(32) });
    expect(h.pending[0]!.nonce).toBe("ee".repeat(32));
    await h.settle();
    expect(await reply).toMatchObject({ result: { nonce_hex: "ee".repeat(32) } });
    expect(h.published).toHaveLength(count);
  });

  it("asks for a session key only with a caller's nonce, and never caches that result", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    await h.settle();
    const count = h.published.length;
    const reply = h.service.verify("a", { nonce: "ee".repeat(32), sessionKey: true });
    expect(h.pending[0]).toMatchObject({ nonce: "ee".repeat(32), sessionKey: true });
    await h.settle();
    expect(await reply).toMatchObject({ result: { ok: true } });
    expect(h.published).toHaveLength(count);
    expect(await h.service.verify("a", { sessionKey: true })).toMatchObject({
      error: { code: "invalid_request" },
    });
    expect(h.pending).toHaveLength(0);
  });

  it("keeps a valid result when the node is briefly unreachable, but not a failed check", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    await h.settle();
    const good = h.latest("a")!;
    h.outcome.set("a", "unavailable");
    h.advance(TTL / 2);
    await h.settle();
    expect(h.latest("a")).toBe(good);
    h.advance(RETRY);
    h.outcome.set("a", "fail");
    await h.settle();
    expect(h.latest("a")).toMatchObject({ ok: false, reason_code: "measurements" });
    // A recent failure is served from the cache; after the retry delay it is tried again.
    await h.service.verify("a");
    expect(h.pending).toHaveLength(0);
    h.advance(RETRY);
    expect(h.pending).toHaveLength(1);
  });

  it("invalidates matching results the moment a revocation arrives, and lifts it", async () => {
    const h = harness();
    h.service.syncNodes(
      new Map([
        ["a", spec("a")],
        ["b", spec("b")],
      ]),
    );
    await h.settle();
    h.revocations.set("r1", revocation({ id: "r1", mrtd: MRTD }));
    h.service.revocationsChanged();
    for (const id of ["a", "b"]) {
      expect(h.latest(id)).toMatchObject({
        ok: false,
        reason_code: "revoked",
        revocation: { id: "r1" },
        expires_at: h.now(),
      });
    }
    const count = h.published.length;
    h.service.revocationsChanged(); // idempotent
    expect(h.published).toHaveLength(count);
    expect(await h.service.verify("a")).toMatchObject({ result: { reason_code: "revoked" } });

    h.revocations.delete("r1");
    h.service.revocationsChanged();
    expect(h.pending.map((p) => p.node.id).sort()).toEqual(["a", "b"]);
    await h.settle();
    expect(h.latest("a")?.ok).toBe(true);
  });

  it("revokes a node by id even before it has any result", () => {
    const h = harness();
    h.revocations.set("r1", revocation({ id: "r1", node_id: "a" }));
    h.service.syncNodes(new Map([["a", spec("a")]]));
    expect(h.latest("a")).toMatchObject({ ok: false, reason_code: "revoked", measurement: null });
  });

  it("applies revocations to results left by an earlier run, and drops stale ones", () => {
    const h = harness();
    const node: TeeNode = { id: "a", tier: 3, endpoint: "http://a", models: [MODEL] };
    h.revocations.set("r1", revocation({ id: "r1", fmspc: "30606a000000" }));
    h.service.seed([
      okResult(node, NOW - 1000, "00".repeat(32)),
      okResult({ ...node, id: "gone" }, NOW, "00".repeat(32)),
    ]);
    expect(h.latest("a")).toMatchObject({ reason_code: "revoked" });
    expect(h.latest("gone")).toMatchObject({ reason_code: "revoked" });
    h.service.syncNodes(new Map([["a", spec("a")]]));
    expect(h.unpublished).toEqual(["gone"]);
  });

  it("re-attests when a node's spec or the approved measurements change", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    await h.settle();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    expect(h.pending).toHaveLength(0);
    h.service.syncNodes(new Map([["a", spec("a", 3, "http://moved:8000")]]));
    expect(h.unpublished).toEqual(["a"]); // the old result vouched for another endpoint
    expect(h.pending[0]!.node.endpoint).toBe("http://moved:8000");
    await h.settle();
    h.service.measurementsChanged();
    expect(h.pending).toHaveLength(1);
  });

  it("drops the result of an attestation that finishes after its node left", async () => {
    const h = harness();
    h.service.syncNodes(new Map([["a", spec("a")]]));
    h.service.syncNodes(new Map());
    await h.settle();
    expect(h.published).toHaveLength(0);
  });
});
