// Tier 4 sessions end to end: a session pins one attested tier-4 node whose quote binds the
// client's nonce and the node's ephemeral session key; its requests reach only that node,
// survive other nodes failing, and end with `session_node_unavailable` (no failover) when
// that node fails. Plus the independent verification endpoint `GET /v1/attestation/{node}`.
import { createHash, createPublicKey, randomBytes } from "node:crypto";
import { pollUntil } from "@zml/harness";
import { parseQuote, reportDataFor, verifyQuote } from "@zml/tdx";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { authHeaders, MODEL, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import {
  approveMeasurements,
  collateral,
  MRTD,
  pki,
  RTMR3,
  teeNode,
  trustRootFile,
  waitForResult,
} from "./attestation-fixtures.ts";

const TIER4 = ["t4-a", "t4-b", "t4-c", "t4-d"];
/** One family per tier-4 node, so an accelerator hint steers a request to a given node. */
const FAMILY: Record<string, string> = {
  "t4-a": "H100",
  "t4-b": "MI300X",
  "t4-c": "A100",
  "t4-d": "L40S",
};
const ALL = [...TIER4, "t1-plain"];
const OTHER_KEY = "e2e-other-account-key-0123456789";
const OTHER_MODEL = "other-model";

let stack: Stack;
let root: Awaited<ReturnType<typeof trustRootFile>>;

beforeAll(async () => {
  root = await trustRootFile();
  stack = await startStack({
    nodes: [
      ...TIER4.map((id) => ({ ...teeNode(id, {}, 4), family: FAMILY[id]! })),
      { nodeId: "t1-plain", family: "H100", tier: 1 },
    ],
    fleet: { models: [{ id: MODEL }, { id: OTHER_MODEL }] },
    allowedTiers: [1, 4],
    // Failed nodes come back quickly, so each test finds fresh nodes for its sessions.
    env: { ATTESTATION_TRUST_ROOT_PEM_FILE: root.path, NODE_COOLDOWN_MS: "1000" },
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
  });
  await waitForStatus(stack, "Active");
  for (const id of TIER4) await waitForResult(stack, id, (r) => r.ok, "attested");
  // A second account, without tier 4, to check that sessions stay private.
  const other = {
    id: "other",
    api_key_sha256: [createHash("sha256").update(OTHER_KEY).digest("hex")],
    allowed_tiers: [1],
  };
  await stack.apply({
    ...stack.fleet,
    accounts: [...stack.fleet.accounts, other],
  });
  await pollUntil(
    async () => (await api("GET", "/v1/models", undefined, OTHER_KEY)).status === 200,
    {
      message: "second account usable",
    },
  );
});

afterAll(async () => {
  await stack?.stop();
  await root?.dispose();
});

interface SessionView {
  session_id: string;
  node_id: string;
  model: string;
  tier: number;
  created_at: number;
  expires_at: number;
  attestation: {
    quote_b64: string;
    nonce_hex: string;
    session_public_key: string;
    tls_key_sha256: string | null;
    measurement: { mrtd: string };
    verified_at: number;
  };
}

async function api(method: string, path: string, body?: unknown, key?: string) {
  const res = await fetch(`${stack.intakeUrl}${path}`, {
    method,
    headers: authHeaders(key),
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, json: (text ? JSON.parse(text) : undefined) as unknown };
}

interface ErrorAnswer {
  error: { code: string; param: string | null; message: string };
}

interface AttestationAnswer {
  node_id: string;
  quote_b64: string;
  nonce_hex: string;
  tls_key_sha256: string;
  expected_report_data: string;
  verification: { ok: boolean };
  expires_at: number;
}

const errorOf = (res: { json: unknown }) => (res.json as ErrorAnswer).error;

async function openSession(extra: Record<string, unknown> = {}): Promise<SessionView> {
  const res = await api("POST", "/v1/sessions", { model: MODEL, ...extra });
  expect(res.status, res.text).toBe(201);
  return res.json as SessionView;
}

const sessionChat = (sessionId: string, extra: Record<string, unknown> = {}) =>
  postChat(stack.intakeUrl, {
    model: MODEL,
    messages: [{ role: "user", content: "Say hello" }],
    tier: 4,
    session_id: sessionId,
    ...extra,
  });

const payloads = () =>
  Object.fromEntries(ALL.map((id) => [id, stack.sims.get(id)!.stats().payloads_received]));

/** What changed per node since `before`. */
function moved(before: Record<string, number>): Record<string, number> {
  const now = payloads();
  return Object.fromEntries(
    ALL.filter((id) => now[id] !== before[id]).map((id) => [id, now[id]! - before[id]!]),
  );
}

const errorCode = (text: string) => (JSON.parse(text) as { error: { code: string } }).error.code;

describe("tier 4 sessions", () => {
  it("open on an attested tier-4 node with a quote binding the nonce and the session key", async () => {
    const before = payloads();
    const nonce = randomBytes(32).toString("hex");
    const s = await openSession({ nonce, ttl_s: 600 });
    expect(s.session_id).toMatch(/^ses-[0-9a-f]{32}$/);
    expect(TIER4).toContain(s.node_id);
    expect(s).toMatchObject({ model: MODEL, tier: 4 });
    expect(s.expires_at - s.created_at).toBe(600_000);
    expect(s.attestation.nonce_hex).toBe(nonce);

    // Verified here, independently of the gateway: test root, collateral, measurement, and
    // REPORTDATA = nonce ‖ SHA-256(the key's SPKI DER), computed from the key we were given.
    const der = Buffer.from(s.attestation.session_public_key, "base64");
    expect(createPublicKey({ key: der, format: "der", type: "spki" }).asymmetricKeyType).toBe(
      "x25519",
    );
    const binding = createHash("sha256").update(der).digest("hex");
    // The session's TLS key is the one the node serves, which every request is pinned to.
    const tlsKeySha256 = s.attestation.tls_key_sha256!;
    expect(tlsKeySha256).toBe(stack.sims.get(s.node_id)!.stats().tls_key_sha256);
    const reportData = reportDataFor({ nonce, tlsKeySha256, sessionKeySha256: binding });
    const verification = verifyQuote({
      quote: s.attestation.quote_b64,
      collateral: collateral,
      at: new Date(),
      trustedRootPem: pki.root.pem,
      policy: {
        approvedMeasurements: [{ mrtd: MRTD, rtmr3: RTMR3 }],
        expectedReportData: reportData,
        requireCollateral: true,
      },
    });
    expect(verification.checks.filter((c) => !c.ok)).toEqual([]);
    expect(verification.fields?.reportdata).toBe(reportData);

    // Without a client nonce the dispatcher draws one; every session gets its own key.
    const other = await openSession();
    expect(other.attestation.nonce_hex).toMatch(/^[0-9a-f]{64}$/);
    expect(other.attestation.session_public_key).not.toBe(s.attestation.session_public_key);
    // Opening a session sends no payload anywhere.
    expect(moved(before)).toEqual({});
  });

  it("routes a session's requests only to its node, even while another tier-4 node fails", async () => {
    const s = await openSession();
    const failing = TIER4.find((id) => id !== s.node_id)!;
    stack.sims.get(failing)!.setFault({ kind: "status", status: 500 });
    try {
      const before = payloads();
      const sessionAnswers: Array<{ status: number; node?: string; attempts?: number }> = [];
      const plainStatuses: number[] = [];
      // Requests outside the session are steered to the failing node (and retried
      // elsewhere); the session's requests, with the same hint, keep going to the
      // session's node: a session overrides routing.
      await pollUntil(
        async () => {
          const res = await sessionChat(s.session_id, { accelerator_hint: FAMILY[failing] });
          sessionAnswers.push({ status: res.status, ...res.routing });
          const plain = await postChat(stack.intakeUrl, {
            model: MODEL,
            messages: [{ role: "user", content: "Say hello" }],
            tier: 4,
            accelerator_hint: FAMILY[failing],
          });
          plainStatuses.push(plain.status);
          return sessionAnswers.length >= 10 && (moved(before)[failing] ?? 0) > 0;
        },
        { timeoutMs: 30_000, intervalMs: 20, message: `${failing} tried by other requests` },
      );
      expect(plainStatuses.every((status) => status === 200)).toBe(true);
      for (const answer of sessionAnswers) {
        expect(answer).toMatchObject({ status: 200, node: s.node_id, tier: 4, attempts: 1 });
      }
      const sessionNode = stack.sims.get(s.node_id)!.stats().payloads_received;
      expect(sessionNode - before[s.node_id]!).toBeGreaterThanOrEqual(sessionAnswers.length);
      expect(moved(before)["t1-plain"]).toBeUndefined();
    } finally {
      stack.sims.get(failing)!.setFault(null);
    }
  });

  it.each([
    ["answers 500", { kind: "status", status: 500, times: 1 }],
    ["resets the connection", { kind: "reset", times: 1 }],
  ] as const)("ends the session without failover when its node %s", async (_what, fault) => {
    const s = await openSession();
    const node = stack.sims.get(s.node_id)!;
    node.setFault(fault);
    const before = payloads();
    const res = await sessionChat(s.session_id);
    expect(res.status, res.text).toBe(503);
    expect(errorCode(res.text)).toBe("session_node_unavailable");
    expect(JSON.parse(res.text).error.message).toMatch(/open a new session/);
    expect(res.headers["retry-after"]).toBeUndefined();
    // The payload went to the session's node once, and to no other node.
    expect(moved(before)).toEqual({ [s.node_id]: 1 });

    // The node is healthy again, but the session stays ended: nothing more is sent.
    expect(node.fault()).toBeNull();
    const again = await sessionChat(s.session_id);
    expect(again.status, again.text).toBe(503);
    expect(errorCode(again.text)).toBe("session_node_unavailable");
    expect(moved(before)).toEqual({ [s.node_id]: 1 });

    // A new session works (on whichever node is usable now).
    const next = await openSession();
    expect((await sessionChat(next.session_id)).status).toBe(200);
  });

  it("keeps sessions private to their account and model, and refuses a wrong tier", async () => {
    const s = await openSession();
    const before = payloads();
    const otherAccount = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(OTHER_KEY),
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: "hi" }],
        session_id: s.session_id,
      }),
    });
    expect(otherAccount.status).toBe(404);
    expect(errorCode(await otherAccount.text())).toBe("session_not_found");
    const otherModel = await sessionChat(s.session_id, { model: OTHER_MODEL });
    expect(otherModel.status, otherModel.text).toBe(404);
    expect(errorCode(otherModel.text)).toBe("session_not_found");
    const unknown = await sessionChat(`ses-${"0".repeat(32)}`);
    expect(unknown.status).toBe(404);
    expect(errorCode(unknown.text)).toBe("session_not_found");
    const tier1 = await sessionChat(s.session_id, { tier: 1 });
    expect(tier1.status, tier1.text).toBe(400);
    expect(JSON.parse(tier1.text).error).toMatchObject({ code: "invalid_request", param: "tier" });
    expect(moved(before)).toEqual({});

    const del = await api("DELETE", `/v1/sessions/${s.session_id}`, undefined, OTHER_KEY);
    expect(del.status).toBe(404);
    expect((await sessionChat(s.session_id)).status).toBe(200);
    const denied = await api("POST", "/v1/sessions", { model: MODEL }, OTHER_KEY);
    expect(denied.status).toBe(403);
    expect(errorOf(denied).code).toBe("tier_not_allowed");
  });

  it("ends a session on DELETE by its owner", async () => {
    const s = await openSession();
    expect((await sessionChat(s.session_id)).status).toBe(200);
    const del = await api("DELETE", `/v1/sessions/${s.session_id}`);
    expect(del.status, del.text).toBe(204);
    const before = payloads();
    const res = await sessionChat(s.session_id);
    expect(res.status, res.text).toBe(404);
    expect(errorCode(res.text)).toBe("session_not_found");
    expect(moved(before)).toEqual({});
    expect((await api("DELETE", `/v1/sessions/${s.session_id}`)).status).toBe(404);
  });

  it("expires a session after its ttl", async () => {
    const s = await openSession({ ttl_s: 2 });
    const statuses: number[] = [];
    const expired = await pollUntil(
      async () => {
        const res = await sessionChat(s.session_id);
        statuses.push(res.status);
        return res.status === 410 ? res : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200, message: "session expired" },
    );
    expect(errorCode(expired.text)).toBe("session_expired");
    expect(statuses.every((code) => code === 200 || code === 410)).toBe(true);
    expect(Date.now()).toBeGreaterThanOrEqual(s.expires_at);
  });

  it("validates the session request", async () => {
    const bad = await api("POST", "/v1/sessions", { model: MODEL, ttl_s: 0 });
    expect(bad.status).toBe(400);
    expect(errorOf(bad).param).toBe("ttl_s");
    const unknown = await api("POST", "/v1/sessions", { model: "nope" });
    expect(unknown.status).toBe(404);
    expect(errorOf(unknown).code).toBe("unknown_model");
  });
});

describe("GET /v1/attestation/{node_id}", () => {
  it("returns the node's current attestation with a quote anyone can verify", async () => {
    const res = await api("GET", "/v1/attestation/t4-a");
    expect(res.status, res.text).toBe(200);
    const a = res.json as AttestationAnswer;
    expect(a).toMatchObject({
      object: "attestation",
      node_id: "t4-a",
      tier: 4,
      verification: { ok: true, reason_code: null, tcb_status: "UpToDate" },
      measurement: { mrtd: MRTD, rtmr3: RTMR3 },
    });
    expect(a.expires_at).toBeGreaterThan(Date.now());
    expect(a.tls_key_sha256).toBe(stack.sims.get("t4-a")!.stats().tls_key_sha256);
    expect(a.expected_report_data).toBe(
      reportDataFor({ nonce: a.nonce_hex, tlsKeySha256: a.tls_key_sha256 }),
    );
    const independent = verifyQuote({
      quote: a.quote_b64,
      collateral: collateral,
      at: new Date(),
      trustedRootPem: pki.root.pem,
      policy: {
        approvedMeasurements: [{ mrtd: MRTD }],
        expectedReportData: a.expected_report_data,
        requireCollateral: true,
      },
    });
    expect(independent.ok).toBe(true);
  });

  it("attests afresh for a caller's nonce", async () => {
    const nonce = randomBytes(32).toString("hex");
    const res = await api("GET", `/v1/attestation/t4-b?nonce=${nonce.toUpperCase()}`);
    expect(res.status, res.text).toBe(200);
    const a = res.json as AttestationAnswer;
    expect(a.nonce_hex).toBe(nonce);
    expect(a.verification.ok).toBe(true);
    expect(parseQuote(a.quote_b64).body.reportdata.startsWith(nonce)).toBe(true);
  });

  it("answers 404 for unknown and non-TEE nodes, 400 for a bad nonce, 401 without a key", async () => {
    for (const node of ["nope", "t1-plain", "bad%20id"]) {
      const res = await api("GET", `/v1/attestation/${node}`);
      expect(res.status, node).toBe(404);
      expect(errorOf(res)).toMatchObject({ code: "not_found", param: "node_id" });
    }
    const bad = await api("GET", "/v1/attestation/t4-a?nonce=abc");
    expect(bad.status).toBe(400);
    expect(errorOf(bad)).toMatchObject({ code: "invalid_request", param: "nonce" });
    const anonymous = await fetch(`${stack.intakeUrl}/v1/attestation/t4-a`);
    expect(anonymous.status).toBe(401);
  });
});
