/* eslint-disable @typescript-eslint/no-unsafe-call --
   loosely typed JSON answers keep the assertions short */
import { openKv } from "@zml/bus";
import { KV_BUCKETS } from "@zml/contracts";
import { activeNodeState } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admin, auth, errorOf, startIntake } from "./helpers.ts";
import type { Harness } from "./helpers.ts";

let h: Harness;
beforeAll(async () => {
  h = await startIntake();
});
afterAll(async () => {
  await h?.close();
});

async function call(method: string, path: string, body?: unknown, headers = admin()) {
  const res = await fetch(`${h.url}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, json: text ? JSON.parse(text) : {} };
}

const node = {
  endpoint: "http://10.0.0.5:8000",
  framework: "vllm",
  accelerator_family: "H100",
  tier: 1,
  models: ["m1"],
};
const policy = {
  accelerator_preference: [{ family: "H100", priority: 1 }],
  latency_target_ms: 2000,
  cost_priority: "latency",
};
const MRTD = "ab".repeat(48);

describe("admin credential", () => {
  it("rejects a missing or wrong token with 401 and hides the API without one configured", async () => {
    expect((await call("GET", "/admin/v1/nodes", undefined, {} as never)).status).toBe(401);
    const wrong = await call("GET", "/admin/v1/nodes", undefined, admin("not-the-admin-token"));
    expect(wrong.status).toBe(401);
    expect(errorOf(wrong.text)).toMatchObject({ code: "unauthorized", param: "authorization" });
    // An API key is not an admin credential.
    expect((await call("GET", "/admin/v1/nodes", undefined, auth())).status).toBe(401);
    const off = await startIntake({ config: { ZML_ADMIN_TOKEN: undefined }, nats: h.nats });
    try {
      const res = await fetch(`${off.url}/admin/v1/nodes`, { headers: admin() });
      expect(res.status).toBe(404);
    } finally {
      await off.close();
    }
  });
});

describe("node state beside the node", () => {
  it("shows each node's last probe failure and status, null before any state is published", async () => {
    expect((await call("PUT", "/admin/v1/nodes/cpu-live", node)).status).toBe(201);
    let one = await call("GET", "/admin/v1/nodes/cpu-live");
    expect(one.json.state).toBeNull();
    const reason =
      "health endpoint answered 503: Loading model (the engine is still loading its model)";
    const state = {
      ...activeNodeState("cpu-live", 1),
      status: "Isolated",
      health_score: 0,
      consecutive_failures: 3,
      last_error: reason,
    };
    await (await openKv(h.bus, KV_BUCKETS.nodeState)).put("cpu-live", JSON.stringify(state));
    one = await call("GET", "/admin/v1/nodes/cpu-live");
    expect(one.json.state).toMatchObject({
      status: "Isolated",
      probe_pending: false,
      last_error: reason,
      consecutive_failures: 3,
      health_score: 0,
    });
    const list = await call("GET", "/admin/v1/nodes");
    const entry = list.json.data.find((d: { key: string }) => d.key === "cpu-live");
    expect(entry.state.last_error).toBe(reason);
    // Other kinds have no live state.
    expect(
      (await call("GET", "/admin/v1/policies")).json.data.every((d: object) => !("state" in d)),
    ).toBe(true);
    expect((await call("DELETE", "/admin/v1/nodes/cpu-live")).status).toBe(200);
  });
});

describe("node endpoints", () => {
  it("refuses metadata and link-local addresses and credentials in the URL, naming endpoint", async () => {
    for (const [endpoint, code] of [
      ["http://169.254.169.254/latest/meta-data", "node_address_metadata"],
      ["http://[fe80::1]:8000", "node_address_metadata"],
      ["http://metadata.google.internal", "node_address_metadata"],
      ["https://user:sk-secret@provider.example.com", "invalid_request"],
    ] as const) {
      const res = await call("PUT", "/admin/v1/nodes/bad-node", { ...node, endpoint });
      expect(res.status, endpoint).toBe(400);
      expect(errorOf(res.text)).toMatchObject({ code, param: "endpoint" });
      expect(res.text).not.toContain("sk-secret");
    }
    expect((await call("GET", "/admin/v1/nodes/bad-node")).status).toBe(404);
  });

  it("refuses the gateway's own host in any spelling, naming endpoint and the rule", async () => {
    for (const [endpoint, code] of [
      ["http://0.0.0.0:6379", "node_address_unspecified"],
      ["http://[::]:8000", "node_address_unspecified"],
      ["http://2130706433/", "node_address_loopback"],
      ["http://0x7f.1:8000/", "node_address_loopback"],
      ["http://[::1]:4222", "node_address_loopback"],
      ["http://[::ffff:127.0.0.1]:4222", "node_address_loopback"],
      ["http://localhost:8222/varz", "node_address_loopback"],
      ["http://nats.localhost:8222/", "node_address_loopback"],
    ] as const) {
      const res = await call("PUT", "/admin/v1/nodes/own-host", { ...node, endpoint });
      expect(res.status, endpoint).toBe(400);
      expect(errorOf(res.text), endpoint).toEqual({
        code,
        param: "endpoint",
        type: "invalid_request_error",
      });
      expect(res.json.error.message).toMatch(/^invalid 'endpoint': /);
    }
    expect((await call("GET", "/admin/v1/nodes/own-host")).status).toBe(404);
  });

  it("accepts loopback with ZML_NODE_ALLOW_LOOPBACK, never the unspecified address", async () => {
    const dev = await startIntake({ nats: h.nats, config: { ZML_NODE_ALLOW_LOOPBACK: true } });
    try {
      const put = async (endpoint: string) => {
        const res = await fetch(`${dev.url}/admin/v1/nodes/local-node`, {
          method: "PUT",
          headers: admin(),
          body: JSON.stringify({ ...node, endpoint }),
        });
        return { status: res.status, text: await res.text() };
      };
      expect((await put("http://127.0.0.1:18101")).status).toBe(201);
      expect((await put("http://localhost:18101")).status).toBe(200);
      expect((await put("http://[::1]:18101")).status).toBe(200);
      const unspecified = await put("http://0.0.0.0:18101");
      expect(unspecified.status).toBe(400);
      expect(errorOf(unspecified.text).code).toBe("node_address_unspecified");
      const removed = await fetch(`${dev.url}/admin/v1/nodes/local-node`, {
        method: "DELETE",
        headers: admin(),
      });
      expect(removed.status).toBeLessThan(300);
    } finally {
      await dev.close();
    }
  });

  it("accepts a link-local range the operator allows, and refuses what the operator denies", async () => {
    const custom = await startIntake({
      nats: h.nats,
      config: { ZML_NODE_ALLOW_CIDRS: ["169.254.10.0/24"], ZML_NODE_DENY_CIDRS: ["10.9.0.0/16"] },
    });
    try {
      const put = (endpoint: string) =>
        fetch(`${custom.url}/admin/v1/nodes/custom-node`, {
          method: "PUT",
          headers: admin(),
          body: JSON.stringify({ ...node, endpoint }),
        });
      expect((await put("http://169.254.10.7:8000")).status).toBe(201);
      const denied = await put("http://10.9.0.1:8000");
      expect(denied.status).toBe(400);
      expect(errorOf(await denied.text())).toMatchObject({
        code: "node_address_denied",
        param: "endpoint",
      });
      const removed = await fetch(`${custom.url}/admin/v1/nodes/custom-node`, {
        method: "DELETE",
        headers: admin(),
      });
      expect(removed.status).toBeLessThan(300);
    } finally {
      await custom.close();
    }
  });
});

describe("path parameters", () => {
  it("answers a malformed or overlong one with the error envelope, naming path", async () => {
    for (const path of ["/admin/v1/nodes/%E0%A4%A", `/admin/v1/nodes/${"k".repeat(1100)}`]) {
      const res = await call("GET", path);
      expect(res.status, path).toBe(400);
      expect(errorOf(res.text)).toMatchObject({ code: "invalid_request", param: "path" });
    }
  });

  it("reaches the route up to a model id's full length, which then names the key", async () => {
    // Longer than fastify's default limit of 100 characters, within a model id's 256.
    const id = `org%2F${"m".repeat(150)}`;
    expect((await call("PUT", `/admin/v1/models/${id}`, {})).status).toBe(201);
    expect((await call("GET", `/admin/v1/models/${id}`)).json.key).toBe(`org/${"m".repeat(150)}`);
    expect((await call("DELETE", `/admin/v1/models/${id}`)).status).toBe(200);
    const tooLong = await call("GET", `/admin/v1/nodes/${"k".repeat(300)}`);
    expect(errorOf(tooLong.text)).toMatchObject({ code: "invalid_request", param: "key" });
  });
});

describe("documents", () => {
  it("creates, reads, lists, updates idempotently and deletes a node", async () => {
    const created = await call("PUT", "/admin/v1/nodes/h100-x", node);
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      action: "created",
      document: { id: "h100-x", max_concurrency: 16 },
    });
    const again = await call("PUT", "/admin/v1/nodes/h100-x", node);
    expect(again.status).toBe(200);
    expect(again.json.action).toBe("unchanged");
    const updated = await call("PUT", "/admin/v1/nodes/h100-x", { ...node, max_concurrency: 4 });
    expect(updated.json.action).toBe("updated");
    // An update keeps the node's registration order; a new node goes last.
    const second = await call("PUT", "/admin/v1/nodes/h100-y", node);
    expect(second.json.document.registered_at).toBe(updated.json.document.registered_at + 1);
    const one = await call("GET", "/admin/v1/nodes/h100-x");
    expect(one.json.document.max_concurrency).toBe(4);
    const list = await call("GET", "/admin/v1/nodes");
    expect(list.json.data.map((d: { key: string }) => d.key)).toEqual(["h100-x", "h100-y"]);
    expect((await call("DELETE", "/admin/v1/nodes/h100-x")).json.action).toBe("deleted");
    expect((await call("GET", "/admin/v1/nodes/h100-x")).status).toBe(404);
    expect((await call("DELETE", "/admin/v1/nodes/h100-x")).status).toBe(404);
  });

  it("accepts every kind of document", async () => {
    const docs: Array<[string, unknown]> = [
      ["policies/interactive", policy],
      ["models/org%2Fnew-model", { default_policy: "interactive" }],
      [
        "accounts/team-a",
        {
          allowed_tiers: [1, 2],
          default_policy: "interactive",
          rate_limit: { requests_per_minute: 600 },
        },
      ],
      [
        "costs/aws-prod.H100",
        {
          kind: "cloud_spot",
          cloud_account: "aws-prod",
          family: "H100",
          nodes: ["h100-y"],
          usd_per_gpu_hour: 2.1,
        },
      ],
      [
        "costs/onprem-mi300x",
        { kind: "on_prem", family: "MI300X", usd_per_gpu_hour: 1.2, gpus_per_node: 8 },
      ],
      ["quality-scores/m1.H100", { model: "m1", family: "H100", score: 87.5, source: "lmarena" }],
      ["measurements/m1-tdx", { model: "m1", tier: 3, mrtd: MRTD.toUpperCase() }],
      [
        "revocations/intel-sa-00837",
        { reason: "TDX module advisory", advisory_id: "INTEL-SA-00837" },
      ],
    ];
    for (const [path, doc] of docs) {
      const res = await call("PUT", `/admin/v1/${path}`, doc);
      expect(res.status, `${path}: ${res.text}`).toBe(201);
    }
    expect((await call("GET", "/admin/v1/models/org%2Fnew-model")).json.document).toEqual({
      id: "org/new-model",
      default_policy: "interactive",
    });
    // Server-side defaults: times from the clock, hex normalised.
    expect(
      (await call("GET", "/admin/v1/costs/aws-prod.H100")).json.document.updated_at,
    ).toBeGreaterThan(0);
    expect(
      (await call("GET", "/admin/v1/revocations/intel-sa-00837")).json.document.revoked_at,
    ).toBeGreaterThan(0);
    expect((await call("GET", "/admin/v1/measurements/m1-tdx")).json.document.mrtd).toBe(MRTD);
  });

  it("applies changes live: a model put over the admin API is served at once", async () => {
    await call("PUT", "/admin/v1/models/live-model", {});
    await pollUntil(
      async () => {
        const res = await fetch(`${h.url}/v1/models`, { headers: auth() });
        const list = (await res.json()) as { data: Array<{ id: string }> };
        return list.data.some((m) => m.id === "live-model");
      },
      { timeoutMs: 10_000, message: "live-model listed" },
    );
  });

  it("issues API keys that work at once and are stored only as hashes", async () => {
    await call("PUT", "/admin/v1/accounts/keyed", { allowed_tiers: [1] });
    const res = await call("POST", "/admin/v1/accounts/keyed/keys");
    expect(res.status).toBe(201);
    const { api_key, sha256 } = res.json as { api_key: string; sha256: string };
    const stored = await call("GET", "/admin/v1/accounts/keyed");
    expect(stored.json.document.api_key_sha256).toEqual([sha256]);
    expect(stored.text).not.toContain(api_key);
    await pollUntil(
      async () => (await fetch(`${h.url}/v1/models`, { headers: auth(api_key) })).status === 200,
      { timeoutMs: 10_000, message: "new key accepted" },
    );
    expect((await call("POST", "/admin/v1/accounts/nobody/keys")).status).toBe(404);
  });
});

describe("invalid admin documents", () => {
  it.each([
    ["nodes/n1", { ...node, endpoint: "ftp://x" }, "invalid_request", "endpoint"],
    ["nodes/n1", { ...node, tier: 5 }, "invalid_request", "tier"],
    ["nodes/n1", { ...node, id: "other" }, "invalid_request", "id"],
    ["nodes/n1", { ...node, colour: "red" }, "invalid_request", "colour"],
    ["nodes/bad%20id", node, "invalid_request", "key"],
    ["policies/p1", { ...policy, cost_priority: "cheap" }, "invalid_request", "cost_priority"],
    [
      "policies/p1",
      { ...policy, accelerator_preference: [] },
      "invalid_request",
      "accelerator_preference",
    ],
    ["policies/p1", { ...policy, name: "p2" }, "invalid_request", "name"],
    ["models/m9", { default_policy: "missing" }, "unknown_policy", "default_policy"],
    ["accounts/a1", { allowed_tiers: [7] }, "invalid_request", "allowed_tiers.0"],
    ["accounts/a1", { api_key: "plaintext" }, "invalid_request", "api_key"],
    ["accounts/a1", { api_key_sha256: ["abc"] }, "invalid_request", "api_key_sha256.0"],
    [
      "accounts/a1",
      { rate_limit: { requests_per_minute: 0 } },
      "invalid_request",
      "rate_limit.requests_per_minute",
    ],
    ["costs/c1", { kind: "spot" }, "invalid_request", "kind"],
    ["costs/c1", { kind: "on_prem", usd_per_gpu_hour: 1 }, "invalid_request", "node_id"],
    [
      "costs/c1",
      { kind: "on_prem", node_id: "n1", usd_per_gpu_hour: -1 },
      "invalid_request",
      "usd_per_gpu_hour",
    ],
    [
      "quality-scores/q1",
      { model: "m1", node_id: "n1", score: 101, source: "x" },
      "invalid_request",
      "score",
    ],
    ["measurements/me1", { model: "m1", tier: 2, mrtd: MRTD }, "invalid_request", "tier"],
    ["measurements/me1", { model: "m1", tier: 3, mrtd: "zz" }, "invalid_request", "mrtd"],
    ["measurements/me1", { model: "nope", tier: 3, mrtd: MRTD }, "unknown_model", "model"],
    ["revocations/r1", { reason: "x" }, "invalid_request", "node_id"],
    ["revocations/r1", { reason: "x", fmspc: "12" }, "invalid_request", "fmspc"],
    ["widgets/w1", {}, "not_found", "kind"],
  ])("PUT %s %j → %s naming %s", async (path, doc, code, param) => {
    const res = await call("PUT", `/admin/v1/${path}`, doc);
    expect(errorOf(res.text)).toMatchObject({ code, param });
    expect(res.status).toBe(code === "not_found" || code === "unknown_model" ? 404 : 400);
  });

  it("rejects malformed JSON, non-objects and empty bodies", async () => {
    expect(errorOf((await call("PUT", "/admin/v1/policies/p1", "{")).text)).toMatchObject({
      code: "invalid_json",
      param: "body",
    });
    expect(errorOf((await call("PUT", "/admin/v1/policies/p1", "[]")).text)).toMatchObject({
      code: "invalid_request",
      param: "body",
    });
    expect(errorOf((await call("PUT", "/admin/v1/policies/p1")).text)).toMatchObject({
      code: "invalid_request",
      param: "body",
    });
  });

  it("lists every problem of a document in the message", async () => {
    const res = await call("PUT", "/admin/v1/nodes/n1", { ...node, tier: 9, framework: "x" });
    expect(res.json.error.message).toMatch(/framework/);
    expect(res.json.error.message).toMatch(/tier/);
  });
});
