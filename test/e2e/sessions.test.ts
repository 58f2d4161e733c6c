// Tier 4 sessions end to end: a session pins one attested tier-4 node (a simulated server
// behind its TD proxy) whose quote binds the client's nonce and the TD's ephemeral session
// key; its requests are sealed to that key, reach only that node, survive other nodes
// failing, and end with `session_node_unavailable` (no failover) when that node fails. Plus
// the independent verification endpoint `GET /v1/attestation/{node}`.
import { createHash, createPublicKey, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { createClient } from "@zml/client";
import type { ConfidentialSession, ZmlApiError } from "@zml/client";
import { SEALED_REQUEST_MEDIA_TYPE } from "@zml/contracts";
import { pollUntil, repoRoot } from "@zml/harness";
import { SealedChannel } from "@zml/seal";
import type { SealInput } from "@zml/seal";
import { parseQuote, reportDataFor, verifyQuote } from "@zml/tdx";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { startSealProxy } from "../support/seal-proxy.ts";
import { API_KEY, authHeaders, MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import {
  approveMeasurements,
  collateral,
  MRTD,
  pki,
  RTMR3,
  teeNode,
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

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      ...TIER4.map((id) => ({ ...teeNode(id, {}, 4), family: FAMILY[id]! })),
      { nodeId: "t1-plain", family: "H100", tier: 1 },
    ],
    fleet: { models: [{ id: MODEL }, { id: OTHER_MODEL }] },
    allowedTiers: [1, 4],
    trustedRootPem: pki.root.pem,
    // Failed nodes come back quickly, so each test finds fresh nodes for its sessions.
    env: { NODE_COOLDOWN_MS: "1000" },
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
  });
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

const PATH = "/v1/chat/completions";
/** One channel per session (and key), as a client keeps: each request its next number. */
const channels = new Map<string, SealedChannel>();

function channelOf(s: SessionView): SealedChannel {
  const id = `${s.session_id} ${s.attestation.session_public_key}`;
  let channel = channels.get(id);
  if (channel === undefined) {
    channel = new SealedChannel({
      sessionId: s.session_id,
      sessionPublicKey: s.attestation.session_public_key,
    });
    channels.set(id, channel);
  }
  return channel;
}

/** A chat request sealed in the session's channel, with the channel's next number. */
function sealed(s: SessionView, extra: Partial<SealInput> = {}) {
  const stream = extra.stream ?? false;
  const model = extra.model ?? MODEL;
  return channelOf(s).seal({
    path: PATH,
    body: Buffer.from(
      JSON.stringify({ model, stream, messages: [{ role: "user", content: "Say hello" }] }),
    ),
    model,
    stream,
    ...extra,
  });
}

/** POSTs bytes as a sealed request and reads the whole answer. */
async function postSealed(bytes: Uint8Array | string, key = API_KEY, path = PATH) {
  const res = await request(`${stack.intakeUrl}${path}`, {
    method: "POST",
    headers: { ...authHeaders(key), "content-type": SEALED_REQUEST_MEDIA_TYPE },
    body: bytes,
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  const header = res.headers["x-zml-routing"];
  return {
    status: res.statusCode,
    headers: res.headers,
    body,
    text: body.toString(),
    routing: typeof header === "string" ? header : "",
  };
}

/** A sealed chat round trip; `answer` is the opened completion of a 200. */
async function sessionChat(s: SessionView, extra: Partial<SealInput> = {}) {
  const req = sealed(s, extra);
  const res = await postSealed(req.bytes);
  const opened = res.status === 200 ? req.opener.openAnswer(res.body) : undefined;
  return { ...res, opened };
}

const node = (routing: string) => /node="([^"]+)"/.exec(routing)?.[1];

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
const errorBody = (text: string) =>
  (JSON.parse(text) as { error: { code: string; param: string | null } }).error;

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
    // The session's TLS key is the one the node's TD proxy serves, which every request is
    // pinned to.
    const tlsKeySha256 = s.attestation.tls_key_sha256!;
    expect(tlsKeySha256).toBe(stack.tdProxies.get(s.node_id)!.tlsKeySha256);
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

  it("serves sealed requests and streams, whose answers only the client opens", async () => {
    const s = await openSession();
    const whole = await sessionChat(s);
    expect(whole.status, whole.text).toBe(200);
    expect(node(whole.routing)).toBe(s.node_id);
    expect(whole.routing).toContain("tier=4");
    expect(whole.text).not.toContain("choices");
    expect(whole.opened?.status).toBe(200);
    expect(JSON.parse(whole.opened!.body.toString()).choices[0].message.content).toBeTruthy();

    const req = sealed(s, { stream: true });
    const res = await postSealed(req.bytes);
    expect(res.status).toBe(200);
    expect(String(res.headers["content-type"])).toContain("text/event-stream");
    // The gateway added no [DONE] of its own: it cannot write inside a sealed stream.
    expect(res.text).not.toContain("[DONE]");
    const reader = req.opener.streamReader();
    const events = reader
      .push(res.body)
      .flatMap((p) => (p.kind === "event" ? [p.event.toString()] : []));
    reader.finish();
    expect(events.at(-1)).toBe("data: [DONE]\n\n");
  });

  it("routes a session's requests only to its node, even while another tier-4 node fails", async () => {
    const s = await openSession();
    const failing = TIER4.find((id) => id !== s.node_id)!;
    stack.sims.get(failing)!.setFault({ kind: "status", status: 500 });
    try {
      const before = payloads();
      for (let i = 0; i < 10; i++) {
        const res = await sessionChat(s);
        expect(res.status, res.text).toBe(200);
        expect(res.routing).toMatch(new RegExp(`node="${s.node_id}".*tier=4, attempts=1`));
      }
      expect(moved(before)).toEqual({ [s.node_id]: 10 });
    } finally {
      stack.sims.get(failing)!.setFault(null);
    }
  });

  it.each([
    ["answers 500", { kind: "status", status: 500, times: 1 }],
    ["resets the connection", { kind: "reset", times: 1 }],
  ] as const)("ends the session without failover when its node %s", async (_what, fault) => {
    const s = await openSession();
    const sim = stack.sims.get(s.node_id)!;
    sim.setFault(fault);
    const before = payloads();
    const res = await sessionChat(s);
    expect(res.status, res.text).toBe(503);
    expect(errorCode(res.text)).toBe("session_node_unavailable");
    expect(JSON.parse(res.text).error.message).toMatch(/open a new session/);
    expect(res.headers["retry-after"]).toBeUndefined();
    // The payload went to the session's node once, and to no other node.
    expect(moved(before)).toEqual({ [s.node_id]: 1 });

    // The node is healthy again, but the session stays ended: nothing more is sent.
    expect(sim.fault()).toBeNull();
    const again = await sessionChat(s);
    expect(again.status, again.text).toBe(503);
    expect(errorCode(again.text)).toBe("session_node_unavailable");
    expect(moved(before)).toEqual({ [s.node_id]: 1 });

    // A new session works (on whichever node is usable now).
    const next = await openSession();
    expect((await sessionChat(next)).status).toBe(200);
  });

  it("keeps sessions private to their account and model, and refuses a wrong tier", async () => {
    const s = await openSession();
    const before = payloads();
    // The other account may not use tier 4 at all; nothing of it reaches the session.
    const otherAccount = await postSealed(sealed(s).bytes, OTHER_KEY);
    expect(otherAccount.status).toBe(403);
    expect(errorCode(otherAccount.text)).toBe("tier_not_allowed");
    const otherModel = await sessionChat(s, { model: OTHER_MODEL });
    expect(otherModel.status, otherModel.text).toBe(404);
    expect(errorCode(otherModel.text)).toBe("session_not_found");
    const unknown = await sessionChat({ ...s, session_id: `ses-${"0".repeat(32)}` });
    expect(unknown.status).toBe(404);
    expect(errorCode(unknown.text)).toBe("session_not_found");
    const tier1 = await postSealed(JSON.stringify({ ...sealed(s).envelope, tier: 1 }));
    expect(tier1.status, tier1.text).toBe(400);
    expect(errorBody(tier1.text)).toMatchObject({ code: "invalid_request", param: "tier" });
    expect(moved(before)).toEqual({});

    const del = await api("DELETE", `/v1/sessions/${s.session_id}`, undefined, OTHER_KEY);
    expect(del.status).toBe(404);
    expect((await sessionChat(s)).status).toBe(200);
    const denied = await api("POST", "/v1/sessions", { model: MODEL }, OTHER_KEY);
    expect(denied.status).toBe(403);
    expect(errorOf(denied).code).toBe("tier_not_allowed");
  });

  it("ends a session on DELETE by its owner, and the TD drops its key", async () => {
    const s = await openSession();
    const proxy = stack.tdProxies.get(s.node_id)!;
    expect((await sessionChat(s)).status).toBe(200);
    const keysBefore = proxy.stats().session_keys;
    const del = await api("DELETE", `/v1/sessions/${s.session_id}`);
    expect(del.status, del.text).toBe(204);
    await pollUntil(() => proxy.stats().session_keys === keysBefore - 1, {
      timeoutMs: 5_000,
      message: "session key dropped on the TD",
    });
    const before = payloads();
    const res = await sessionChat(s);
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
        const res = await sessionChat(s);
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

describe("sealed requests refused", () => {
  it("in clear: a tier-4 body, a body naming a session, a sealed body on /v1/infer", async () => {
    const s = await openSession();
    const before = payloads();
    const clear = { model: MODEL, messages: [{ role: "user", content: "hi" }] };
    for (const [body, param] of [
      [{ ...clear, tier: 4 }, "tier"],
      [{ ...clear, tier: 4, session_id: s.session_id }, "session_id"],
      [{ ...clear, session_id: s.session_id }, "session_id"],
    ] as const) {
      const res = await postChat(stack.intakeUrl, body);
      expect(res.status, res.text).toBe(400);
      expect(errorBody(res.text)).toMatchObject({ code: "sealed_body_required", param });
    }
    const infer = await postSealed(sealed(s).bytes, API_KEY, "/v1/infer");
    expect(infer.status).toBe(400);
    expect(errorBody(infer.text)).toMatchObject({ code: "invalid_request", param: "content-type" });
    expect(moved(before)).toEqual({});
  });

  it("a tampered ciphertext, a replay, or a body sealed to another session's key", async () => {
    const a = await openSession();
    const b = await openSession();
    const before = payloads();
    const sent = sealed(a);
    const ct = Buffer.from(sent.envelope.ciphertext, "base64url");
    ct[ct.length - 1]! ^= 1;
    const tampered = await postSealed(
      JSON.stringify({ ...sent.envelope, ciphertext: ct.toString("base64url") }),
    );
    expect(tampered.status, tampered.text).toBe(400);
    expect(errorCode(tampered.text)).toBe("sealed_request_rejected");
    expect(moved(before)).toEqual({});

    // The untouched request goes through once; the same bytes again are a replay.
    expect((await postSealed(sent.bytes)).status).toBe(200);
    const replay = await postSealed(sent.bytes);
    expect(replay.status, replay.text).toBe(409);
    expect(errorCode(replay.text)).toBe("sealed_request_replayed");
    expect(moved(before)).toEqual({ [a.node_id]: 1 });

    // Sealed to B's key but sent in A's session: refused before anything is sent.
    const toB = sealed({ ...a, attestation: b.attestation });
    const mismatch = await postSealed(toB.bytes);
    expect(mismatch.status, mismatch.text).toBe(400);
    expect(errorBody(mismatch.text)).toMatchObject({
      code: "sealed_key_mismatch",
      param: "key_id",
    });
    // …and relabelled with A's key id, A's TD cannot open it.
    const relabelled = await postSealed(
      JSON.stringify({ ...toB.envelope, key_id: sent.envelope.key_id }),
    );
    expect(errorCode(relabelled.text)).toBe("sealed_request_rejected");
    expect(moved(before)).toEqual({ [a.node_id]: 1 });
  });

  it("a request relabelled to another position, held back beyond the window, or of version 1", async () => {
    const s = await openSession();
    const before = payloads();
    const first = sealed(s);
    const next = sealed(s);
    // The next request relabelled as the first: it does not open, and uses no number up.
    const relabelled = await postSealed(
      JSON.stringify({ ...next.envelope, seq: first.envelope.seq }),
    );
    expect(relabelled.status, relabelled.text).toBe(400);
    expect(errorBody(relabelled.text)).toMatchObject({ code: "sealed_request_rejected" });
    expect(moved(before)).toEqual({});
    // A request overtaken by one SEALED_REPLAY_WINDOW (1024) numbers later is refused.
    const far = sealed(s, { seq: first.envelope.seq + 1024 });
    expect((await postSealed(far.bytes)).status).toBe(200);
    expect((await postSealed(next.bytes)).status).toBe(200);
    const late = await postSealed(first.bytes);
    expect(late.status, late.text).toBe(409);
    expect(errorBody(late.text)).toMatchObject({ code: "sealed_request_replayed", param: "seq" });
    expect(moved(before)).toEqual({ [s.node_id]: 2 });
    // The previous format is refused by its version at intake, by name.
    const v1 = await postSealed(JSON.stringify({ ...sealed(s).envelope, zml_sealed: 1 }));
    expect(v1.status).toBe(400);
    expect(errorBody(v1.text)).toMatchObject({ code: "invalid_request", param: "zml_sealed" });
    expect(JSON.parse(v1.text).error.message).toContain("version 2");
    expect(moved(before)).toEqual({ [s.node_id]: 2 });
  });

  it("an envelope without its session, or with a prompt beside the ciphertext", async () => {
    const s = await openSession();
    const before = payloads();
    const { envelope } = sealed(s);
    const noSession: Partial<typeof envelope> = { ...envelope };
    delete noSession.session_id;
    const missing = await postSealed(JSON.stringify(noSession));
    expect(missing.status).toBe(400);
    expect(errorBody(missing.text)).toMatchObject({ code: "invalid_request", param: "session_id" });
    const leaky = await postSealed(JSON.stringify({ ...envelope, messages: [] }));
    expect(leaky.status).toBe(400);
    expect(errorBody(leaky.text).code).toBe("invalid_request");
    expect(moved(before)).toEqual({});
  });
});

describe("the TypeScript SDK's sessions", () => {
  const client = () =>
    createClient({ baseUrl: stack.intakeUrl, apiKey: API_KEY, timeoutMs: 20_000 });
  const trust = {
    trustedRootPem: pki.root.pem,
    approvedMeasurements: [{ mrtd: MRTD, rtmr3: RTMR3 }],
  };

  it("verify the quote, then seal and open chats and streams transparently", async () => {
    const session = await client().sessions.create({ model: MODEL, ...trust });
    try {
      expect(session.verification.ok).toBe(true);
      const answer = await session.chat({ messages: [{ role: "user", content: "Say hello" }] });
      expect(answer.routing).toMatchObject({ node: session.node_id, tier: 4 });
      expect(answer.choices[0]!.message.content).toBeTruthy();
      let text = "";
      for await (const chunk of await session.chat({
        messages: [{ role: "user", content: "Say hello" }],
        stream: true,
      })) {
        text += chunk.choices[0]?.delta.content ?? "";
      }
      expect(text.length).toBeGreaterThan(0);
    } finally {
      await session.close();
    }
  });

  it("take the measurement from the public allowlist, and refuse a node it does not approve", async () => {
    const session = await client().sessions.create({ model: MODEL, trustedRootPem: pki.root.pem });
    await session.close();
    const error = await client()
      .sessions.create({
        model: MODEL,
        ...trust,
        approvedMeasurements: [{ mrtd: "ee".repeat(48) }],
      })
      .catch((e: unknown) => e as Error & { code: string });
    expect(error).toMatchObject({ code: "attestation_failed" });
    // Intel's root (the default) does not vouch for the simulator's quotes.
    const intel = await client()
      .sessions.create({ model: MODEL, approvedMeasurements: trust.approvedMeasurements })
      .catch((e: unknown) => e as Error & { code: string });
    expect(intel).toMatchObject({ code: "attestation_failed" });
  });

  it("detect a gateway that passes off its own answer", async () => {
    // A hostile gateway in front of the real one: it relays the request, then replaces the
    // answer with another session's sealed answer, or with a plain completion.
    const stolen = await postSealed(sealed(await openSession()).bytes);
    let mode: "relay" | "swap" | "earlier" | "plain" = "relay";
    /** The real answer to this session's previous request, as relayed. */
    let earlier: Buffer | undefined;
    const hostile = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        void (async () => {
          const real = await request(`${stack.intakeUrl}${req.url}`, {
            method: req.method as "POST",
            headers: req.headers as Record<string, string>,
            body: Buffer.concat(chunks),
          });
          const headers = { ...real.headers } as Record<string, string>;
          delete headers["content-length"];
          if (req.url !== PATH) {
            res.writeHead(real.statusCode, headers).end(Buffer.from(await real.body.arrayBuffer()));
            return;
          }
          const answer = Buffer.from(await real.body.arrayBuffer());
          if (mode === "relay") {
            earlier = answer;
            res.writeHead(real.statusCode, headers).end(answer);
          } else if (mode === "earlier") {
            res.writeHead(200, headers).end(earlier);
          } else if (mode === "swap") {
            res.writeHead(200, headers).end(stolen.body);
          } else {
            headers["content-type"] = "application/json";
            res
              .writeHead(200, headers)
              .end(JSON.stringify({ choices: [{ message: { content: "fake" } }] }));
          }
        })();
      });
    });
    await new Promise<void>((resolve) => hostile.listen(0, "127.0.0.1", resolve));
    try {
      const via = createClient({
        baseUrl: `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`,
        apiKey: API_KEY,
      });
      // The same session, reached through the hostile gateway.
      const session: ConfidentialSession = await via.sessions.create({ model: MODEL, ...trust });
      const relayed = await session.chat({ messages: [{ role: "user", content: "hi" }] });
      expect(relayed.choices[0]!.message.content).toBeTruthy();
      // Another session's answer, this session's answer to its previous request, a plain one.
      for (const m of ["swap", "earlier", "plain"] as const) {
        mode = m;
        const error = await session
          .chat({ messages: [{ role: "user", content: "hi" }] })
          .catch((e: unknown) => e as ZmlApiError);
        expect(error, m).toMatchObject({ code: "sealed_response_invalid" });
      }
      await session.close();
    } finally {
      hostile.close();
    }
  });
});

describe("zml seal-proxy", () => {
  it("opens a new verified session when its session's node fails, so the client never sees it", async () => {
    const { process: proxy, baseUrl: url } = await startSealProxy({
      gateway: stack.intakeUrl,
      apiKey: API_KEY,
      model: MODEL,
      rootPemFile: stack.trustedRootPemFile!,
      mrtd: MRTD,
    });
    try {
      const ask = async () => {
        const res = await request(`${url}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
        });
        const text = await res.body.text();
        return { status: res.statusCode, text, node: node(String(res.headers["x-zml-routing"])) };
      };
      const first = await ask();
      expect(first.status, first.text).toBe(200);
      // The session's node fails the next request: the gateway ends the session
      // (session_node_unavailable), and the seal proxy seals the request again to a new one.
      stack.sims.get(first.node!)!.setFault({ kind: "status", status: 500, times: 1 });
      const second = await ask();
      expect(second.status, second.text).toBe(200);
      expect(JSON.parse(second.text).choices[0].message.content).toBeTruthy();
      expect(proxy.output()).toMatch(/re-opened after ses-[0-9a-f]{32} ended/);
      // A request for another model is not sealed anywhere.
      const other = await request(`${url}/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ model: OTHER_MODEL, messages: [] }),
      });
      expect(other.statusCode).toBe(400);
      expect(errorBody(await other.body.text())).toMatchObject({
        code: "unknown_model",
        param: "model",
      });
    } finally {
      await proxy.stop("SIGTERM", 3_000);
    }
  });

  it("refuses to listen off loopback: requests arrive there in clear", async () => {
    const { execFile } = await import("node:child_process");
    const out = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        [
          join(repoRoot(), "libs/cli/src/main.ts"),
          "seal-proxy",
          ...["--gateway", stack.intakeUrl, "--api-key", API_KEY, "--model", MODEL],
          ...["--listen", "0.0.0.0:0"],
        ],
        (_error, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
      );
    });
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/loopback only/);
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
    expect(a.tls_key_sha256).toBe(stack.tdProxies.get("t4-a")!.tlsKeySha256);
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
    // One answer, byte for byte, for a tier-1 node that exists and for ids that name no node:
    // the endpoint is no inventory of the tier-1 and tier-2 fleet.
    const nonce = randomBytes(32).toString("hex");
    const answers = new Set<string>();
    for (const node of [
      "nope",
      "t1-plain",
      "bad%20id",
      `t1-plain?nonce=${nonce}`,
      `nope?nonce=${nonce}`,
    ]) {
      const res = await api("GET", `/v1/attestation/${node}`);
      expect(res.status, node).toBe(404);
      expect(errorOf(res)).toMatchObject({ code: "not_found", param: "node_id" });
      answers.add(res.text);
    }
    expect([...answers]).toHaveLength(1);
    const bad = await api("GET", "/v1/attestation/t4-a?nonce=abc");
    expect(bad.status).toBe(400);
    expect(errorOf(bad)).toMatchObject({ code: "invalid_request", param: "nonce" });
    const anonymous = await fetch(`${stack.intakeUrl}/v1/attestation/t4-a`);
    expect(anonymous.status).toBe(401);
  });
});
