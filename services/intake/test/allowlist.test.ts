import { request } from "node:http";
import { openKv } from "@zml/bus";
import { ATTESTATION_RESULTS_BUCKET, AttestationResultSchema, KV_BUCKETS } from "@zml/contracts";
import type { AttestationResult, NodeSpec, Revocation } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AllowlistSchema, buildAllowlist } from "../src/allowlist/allowlist.ts";
import type { Allowlist } from "../src/allowlist/allowlist.ts";
import { startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

const NOW = Date.parse("2026-05-01T12:00:00Z");
const MEASUREMENT = {
  mrtd: "a1".repeat(48),
  rtmr0: "00".repeat(48),
  rtmr1: "00".repeat(48),
  rtmr2: "00".repeat(48),
  rtmr3: "b3".repeat(48),
};

function spec(id: string, tier: number, endpoint = `https://${id}.partner.example:8443`): NodeSpec {
  return {
    id,
    endpoint,
    framework: "vllm",
    accelerator_family: "H100",
    tier,
    models: ["m1"],
    apis: ["chat", "completions"],
    max_concurrency: 4,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: 0,
    auth: { header: "Authorization", scheme: "Bearer", secret_ref: "partner-secret" },
  };
}

function result(node: NodeSpec, extra: Partial<AttestationResult> = {}): AttestationResult {
  return AttestationResultSchema.parse({
    type: "attestation.result.v1",
    node_id: node.id,
    tier: node.tier,
    ok: true,
    reason_code: null,
    reason: null,
    measurement: MEASUREMENT,
    approved_models: ["m1"],
    tcb_status: "UpToDate",
    advisory_ids: [],
    pck_serial: "0abc",
    fmspc: "30606a000000",
    verified_at: NOW - 1000,
    expires_at: NOW + 60_000,
    quote_b64: "AAAA",
    nonce_hex: "11".repeat(32),
    checks: [],
    revocation: null,
    endpoint: node.endpoint,
    tls_key_sha256: "7e".repeat(32),
    ...extra,
  });
}

const revocation = (nodeId: string): Revocation => ({
  id: "rev-1",
  reason: "INTEL-SA-01234 in the TDX module",
  node_id: nodeId,
  revoked_at: NOW,
});

describe("buildAllowlist", () => {
  const good = spec("t3-good", 3);
  const stale = spec("t3-stale", 3);
  const revoked = spec("t4-revoked", 4);
  const failed = spec("t3-failed", 3);
  const moved = spec("t3-moved", 3);
  const fresh = spec("t3-new", 3);
  const plain = spec("t1-plain", 1);
  const nodes = new Map([good, stale, revoked, failed, moved, fresh, plain].map((n) => [n.id, n]));
  const results = new Map([
    [good.id, result(good)],
    [stale.id, result(stale, { expires_at: NOW - 1 })],
    [revoked.id, result(revoked)],
    [
      failed.id,
      result(failed, {
        ok: false,
        reason_code: "report_data",
        reason: "report_data: mismatch",
        tls_key_sha256: null,
      }),
    ],
    [moved.id, result(moved, { endpoint: "https://old.example:8443" })],
    [plain.id, { ...result(good), node_id: plain.id }],
  ]);
  const list = buildAllowlist(
    { nodes, results, revocations: new Map([["rev-1", revocation(revoked.id)]]) },
    NOW,
  );
  const byId = new Map(list.nodes.map((n) => [n.node_id, n]));

  it("lists every tier 3–4 node and nothing of tiers 1–2", () => {
    expect(AllowlistSchema.parse(list)).toEqual(list);
    expect(list.nodes.map((n) => n.node_id)).toEqual([
      "t3-failed",
      "t3-good",
      "t3-moved",
      "t3-new",
      "t3-stale",
      "t4-revoked",
    ]);
  });

  it("gives each node its status and the reason when it is not attested", () => {
    expect(byId.get("t3-good")).toMatchObject({
      status: "attested",
      reason: null,
      tier: 3,
      models: ["m1"],
      accelerator_family: "H100",
      measurement: MEASUREMENT,
      tcb_status: "UpToDate",
      tls_key_sha256: "7e".repeat(32),
      attested_at: new Date(NOW - 1000).toISOString(),
      valid_until: new Date(NOW + 60_000).toISOString(),
    });
    expect(byId.get("t3-stale")?.status).toBe("expired");
    expect(byId.get("t4-revoked")).toMatchObject({
      status: "revoked",
      reason: "INTEL-SA-01234 in the TDX module",
      revocation: { id: "rev-1", reason: "INTEL-SA-01234 in the TDX module" },
    });
    expect(byId.get("t3-failed")).toMatchObject({ status: "failing", valid_until: null });
    expect(byId.get("t3-moved")).toMatchObject({
      status: "failing",
      reason: expect.stringMatching(/endpoint/),
    });
    expect(byId.get("t3-new")).toMatchObject({
      status: "failing",
      measurement: null,
      attested_at: null,
    });
  });

  it("shows no endpoint, credential reference, quote or platform serial", () => {
    const text = JSON.stringify(list);
    for (const secret of ["partner.example", "partner-secret", "AAAA", "0abc", "Authorization"]) {
      expect(text).not.toContain(secret);
    }
  });
});

describe("GET /v1/attestation and /allowlist", () => {
  let intake: Harness;
  const node = spec("t3-a", 3);
  beforeAll(async () => {
    intake = await startIntake();
    await (await openKv(intake.bus, KV_BUCKETS.nodes)).put(node.id, JSON.stringify(node));
    const attested = result(node, { verified_at: Date.now(), expires_at: Date.now() + 600_000 });
    await (
      await openKv(intake.bus, ATTESTATION_RESULTS_BUCKET)
    ).put(node.id, JSON.stringify(attested));
  });
  afterAll(async () => {
    await intake?.close();
  });

  it("answers the allowlist as JSON without credentials", async () => {
    const list = await pollUntil(
      async () => {
        const res = await fetch(`${intake.url}/v1/attestation`);
        expect(res.status).toBe(200);
        const body = (await res.json()) as Allowlist;
        return body.nodes[0]?.status === "attested" ? body : undefined;
      },
      { timeoutMs: 5_000, message: "t3-a attested in the allowlist" },
    );
    expect(list.nodes.map((n) => n.node_id)).toEqual(["t3-a"]);
  });

  it("streams a new list as soon as a revocation lands", async () => {
    const events: Allowlist[] = [];
    const req = request(`${intake.url}/v1/attestation`, {
      headers: { accept: "text/event-stream" },
    });
    const opened = new Promise<void>((resolve, reject) => {
      req.on("response", (res) => {
        expect(res.headers["content-type"]).toBe("text/event-stream");
        let buffer = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          buffer += chunk;
          let end;
          while ((end = buffer.indexOf("\n\n")) !== -1) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = event.split("\n").find((l) => l.startsWith("data: "));
            if (event.startsWith("event: allowlist") && data)
              events.push(AllowlistSchema.parse(JSON.parse(data.slice(6))));
          }
        });
        resolve();
      });
      req.on("error", reject);
    });
    req.end();
    try {
      await opened;
      await pollUntil(() => events.length > 0, { timeoutMs: 5_000, message: "first event" });
      expect(events[0]?.nodes[0]?.status).toBe("attested");
      await (
        await openKv(intake.bus, KV_BUCKETS.revocations)
      ).put("rev-1", JSON.stringify(revocation(node.id)));
      const revoked = await pollUntil(() => events.find((e) => e.nodes[0]?.status === "revoked"), {
        timeoutMs: 5_000,
        message: "a revoked event",
      });
      expect(revoked.nodes[0]?.reason).toBe("INTEL-SA-01234 in the TDX module");
    } finally {
      req.destroy();
    }
  });

  it("serves the human page, which follows the stream", async () => {
    const res = await fetch(`${intake.url}/allowlist`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const html = await res.text();
    expect(html).toContain('new EventSource("/v1/attestation")');
  });

  it("publishes the allowlist in the OpenAPI document", async () => {
    const doc = (await (await fetch(`${intake.url}/openapi.json`)).json()) as {
      paths: Record<string, { get?: unknown }>;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.paths["/v1/attestation"]?.get).toBeDefined();
    expect(doc.components.schemas["Allowlist"]).toBeDefined();
  });
});
