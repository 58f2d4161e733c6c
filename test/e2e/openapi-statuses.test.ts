// /openapi.json against live answers: every error status each operation can answer is
// provoked on a real running gateway (real HTTP sockets, the four services, simulated nodes,
// a tier-4 node behind its TD proxy), and each answer must be documented for that method and
// path in the document the intake serves, its code among those the document lists for the
// status. Every status the document lists must in turn be provoked here, or be named below
// with the reason it cannot be. Phases: ordinary bad input; the authentication throttle;
// services that take a request and never answer (SIGSTOP); a stopping intake; the bus gone.
import { request as httpRequest } from "node:http";
import { createHash } from "node:crypto";
import { ERROR_CODES, SEALED_REQUEST_MEDIA_TYPE } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { SealedChannel } from "@zml/seal";
import { Agent, request } from "undici";
import type { Dispatcher } from "undici";
import type { SimFault } from "@zml/node-sim";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, API_KEY, MODEL, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { approveMeasurements, MRTD, pki, teeNode, waitForResult } from "./attestation-fixtures.ts";

const LIMITED_KEY = "e2e-limited-key-0123456789";
const NO_T4_KEY = "e2e-no-tier4-key-0123456789";
/** One node and model per fault, so no fault's failures demote another's node. */
const FAULTY = ["n-4xx", "n-5xx", "n-hang", "n-slow"] as const;
const modelOf = (node: (typeof FAULTY)[number]) => `m-${node.slice(2)}`;
const ORPHAN_MODEL = "orphan-model";
const ALL_APIS = ["chat", "completions", "responses", "embeddings"] as const;
const BODY_LIMIT = 64 * 1024;
/** Statuses no input can make a correct gateway answer, by operation (`*`: every one). */
const NOT_PROVOKED: Record<string, string> = {
  "* 500": "internal_error is the last resort for a failure nothing else names: a bug",
};

type Doc = {
  paths: Record<string, Record<string, { responses: Record<string, Record<string, unknown>> }>>;
};

let stack: Stack;
let doc: Doc;
let main = new Agent();
const agents: Agent[] = [];

/** Answers seen: `METHOD /path/{template}` → status → error codes (`(node)`: the node's body). */
const seen = new Map<string, Map<string, Set<string>>>();

function record(op: string, status: number, text: string) {
  let code: string;
  try {
    const parsed = JSON.parse(text) as { error?: { code?: unknown } };
    const c = parsed.error?.code;
    code = typeof c === "string" && c in ERROR_CODES ? c : "(node)";
  } catch {
    code = "(not json)";
  }
  const byStatus = seen.get(op) ?? new Map<string, Set<string>>();
  seen.set(op, byStatus);
  byStatus.set(String(status), (byStatus.get(String(status)) ?? new Set()).add(code));
}

/** A client from an address of its own, so its failed authentications count for it alone. */
let nextAddress = 0;
function freshAgent(): Agent {
  const n = nextAddress++;
  const agent = new Agent({ localAddress: `127.0.${10 + Math.floor(n / 250)}.${(n % 250) + 2}` });
  agents.push(agent);
  return agent;
}

interface Call {
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  agent?: Dispatcher;
}

/** One request of operation `op` (`METHOD /template`) at `path`; returns its status and code. */
async function send(op: string, path: string, call: Call = {}) {
  const method = op.split(" ")[0] as Dispatcher.HttpMethod;
  const res = await request(`${stack.intakeUrl}${path}`, {
    method,
    headers: call.headers ?? {},
    ...(call.body === undefined ? {} : { body: call.body }),
    dispatcher: call.agent ?? main,
  });
  const text = await res.body.text();
  record(op, res.statusCode, text);
  return { status: res.statusCode, text, code: codeOf(text) };
}

/** The ZML error code of an answer; undefined for a success or a node's own body. */
function codeOf(text: string): string | undefined {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === "string" && code in ERROR_CODES ? code : undefined;
  } catch {
    return undefined;
  }
}

/** A body that arrives too slowly: one byte of the announced 64, then nothing. */
function sendSlowBody(op: string, path: string, headers: Record<string, string>) {
  const url = new URL(`${stack.intakeUrl}${path}`);
  return new Promise<number>((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: op.split(" ")[0],
        headers: { ...headers, "content-type": "application/json", "content-length": "64" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8").on("data", (c: string) => (text += c));
        res.on("end", () => {
          record(op, res.statusCode!, text);
          req.destroy();
          resolve(res.statusCode!);
        });
      },
    );
    req.on("error", reject);
    req.write("{");
  });
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const json = { "content-type": "application/json" };
const user = (key = API_KEY) => ({ ...bearer(key), ...json });
const admin = () => ({ ...bearer(ADMIN_TOKEN), ...json });

/** The inference operations, each with a body that is valid for it. */
const INFERENCE: Array<{ path: string; sealable: boolean; body: (model: string) => object }> = [
  {
    path: "/v1/chat/completions",
    sealable: true,
    body: (model) => ({ model, messages: [{ role: "user", content: "Say hello" }] }),
  },
  { path: "/v1/completions", sealable: true, body: (model) => ({ model, prompt: "Say hello" }) },
  { path: "/v1/responses", sealable: true, body: (model) => ({ model, input: "Say hello" }) },
  { path: "/v1/embeddings", sealable: true, body: (model) => ({ model, input: "hello" }) },
  {
    path: "/v1/infer",
    sealable: false,
    body: (model) => ({ model, messages: [{ role: "user", content: "Say hello" }] }),
  },
];
const post = (path: string) => `POST ${path}`;

const ADMIN_KINDS = [
  "nodes",
  "models",
  "policies",
  "accounts",
  "costs",
  "cloud-accounts",
  "quality-scores",
  "measurements",
  "revocations",
];

/** Every operation with a concrete path and whether it takes the API key or the admin token. */
function everyOperation(): Array<{ op: string; path: string; headers: Record<string, string> }> {
  const ops = [
    ...INFERENCE.map((i) => ({ op: post(i.path), path: i.path, headers: user() })),
    { op: "GET /v1/models", path: "/v1/models", headers: user() },
    { op: "GET /v1/models/{model}", path: `/v1/models/${MODEL}`, headers: user() },
    { op: "POST /v1/sessions", path: "/v1/sessions", headers: user() },
    { op: "DELETE /v1/sessions/{id}", path: "/v1/sessions/nope", headers: user() },
    { op: "GET /v1/attestation", path: "/v1/attestation", headers: {} },
    { op: "GET /v1/attestation/{node_id}", path: "/v1/attestation/t4", headers: user() },
    { op: "POST /v1/jobs", path: "/v1/jobs", headers: user() },
    { op: "GET /v1/jobs/{id}", path: "/v1/jobs/nope", headers: user() },
    {
      op: "POST /admin/v1/accounts/{key}/keys",
      path: "/admin/v1/accounts/e2e/keys",
      headers: admin(),
    },
  ];
  for (const kind of ADMIN_KINDS) {
    ops.push({ op: `GET /admin/v1/${kind}`, path: `/admin/v1/${kind}`, headers: admin() });
    for (const method of ["GET", "PUT", "DELETE"]) {
      ops.push({
        op: `${method} /admin/v1/${kind}/{key}`,
        path: `/admin/v1/${kind}/nope`,
        headers: admin(),
      });
    }
  }
  return ops;
}

const takesBody = (op: string) => !op.startsWith("GET");

interface SessionView {
  session_id: string;
  expires_at: number;
  attestation: { session_public_key: string };
}

async function openSession(ttlS?: number): Promise<SessionView> {
  const res = await send("POST /v1/sessions", "/v1/sessions", {
    headers: user(),
    body: JSON.stringify({ model: MODEL, ...(ttlS ? { ttl_s: ttlS } : {}) }),
  });
  expect(res.status, res.text).toBe(201);
  return JSON.parse(res.text) as SessionView;
}

/** One channel per session, as a client keeps. */
const channels = new Map<string, SealedChannel>();
function sealedBytes(s: SessionView, path: string, body: object) {
  let channel = channels.get(s.session_id);
  if (channel === undefined) {
    channel = new SealedChannel({
      sessionId: s.session_id,
      sessionPublicKey: s.attestation.session_public_key,
    });
    channels.set(s.session_id, channel);
  }
  return channel.seal({
    path,
    body: Buffer.from(JSON.stringify(body)),
    model: MODEL,
    stream: false,
  }).bytes;
}

const sealedHeaders = () => ({ ...bearer(API_KEY), "content-type": SEALED_REQUEST_MEDIA_TYPE });

beforeAll(async () => {
  stack = await startStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      ...FAULTY.map((nodeId) => ({
        nodeId,
        family: "FLAKY",
        models: [modelOf(nodeId)],
        apis: [...ALL_APIS],
      })),
      { ...teeNode("t4", {}, 4), apis: [...ALL_APIS] },
    ],
    fleet: {
      models: [MODEL, ORPHAN_MODEL, ...FAULTY.map(modelOf)].map((id) => ({ id })),
    },
    allowedTiers: [1, 4],
    trustedRootPem: pki.root.pem,
    env: {
      ZML_BODY_LIMIT_BYTES: String(BODY_LIMIT),
      ZML_BODY_TIMEOUT_MS: "1000",
      ZML_REQUEST_TIMEOUT_MS: "3000",
      ZML_KEY_STORE_MAX_STALE_MS: "300",
      ZML_ATTESTATION_NONCE_PER_MINUTE: "1",
      // A node that failed is tried again by the next request, so each fault is seen once.
      NODE_COOLDOWN_MS: "0",
      // A stopping intake keeps serving this long, so a request can be in flight when it drains.
      ZML_SHUTDOWN_NOT_READY_MS: "1000",
    },
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
  });
  const sha = (key: string) => createHash("sha256").update(key).digest("hex");
  await stack.apply({
    ...stack.fleet,
    accounts: [
      ...stack.fleet.accounts,
      {
        id: "limited",
        api_key_sha256: [sha(LIMITED_KEY)],
        allowed_tiers: [1],
        rate_limit: { requests_per_minute: 1, burst: 1 },
      },
      { id: "no-t4", api_key_sha256: [sha(NO_T4_KEY)], allowed_tiers: [1] },
    ],
  });
  await waitForStatus(stack, "Active");
  await waitForResult(stack, "t4", (r) => r.ok, "attested");
  await pollUntil(
    async () => {
      const res = await request(`${stack.intakeUrl}/v1/models`, {
        headers: bearer(NO_T4_KEY),
        dispatcher: main,
      });
      await res.body.dump();
      return res.statusCode === 200;
    },
    { message: "the added accounts usable" },
  );
  doc = (await (await request(`${stack.intakeUrl}/openapi.json`)).body.json()) as Doc;
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await Promise.all([main, ...agents].map((a) => a.close()));
});

describe("every error status, provoked on the live gateway", () => {
  it("bad input: 400, 401, 403, 404, 408, 413, 415 on every operation that can answer them", async () => {
    // Bodies too slow for the body deadline, all at once: each waits for it.
    const slow = everyOperation().filter(({ op }) => takesBody(op));
    const timedOut = await Promise.all(slow.map((o) => sendSlowBody(o.op, o.path, o.headers)));
    expect(timedOut).toEqual(slow.map(() => 408));
    for (const { op, path, headers } of everyOperation()) {
      // Without a credential, from an address of its own (the throttle counts 401s by address).
      const anonymous = { ...headers };
      delete anonymous.authorization;
      if (headers.authorization !== undefined) {
        expect((await send(op, path, { headers: anonymous, agent: freshAgent() })).status).toBe(
          401,
        );
      }
      if (takesBody(op)) {
        const big = "x".repeat(BODY_LIMIT + 1024);
        expect((await send(op, path, { headers, body: big })).status, op).toBe(413);
        const unreadable = { ...headers, "content-type": ";;;" };
        expect((await send(op, path, { headers: unreadable, body: "{}" })).status, op).toBe(415);
      }
    }
    // Malformed JSON, and a malformed percent-encoding in a path parameter.
    for (const { op, path, headers } of everyOperation()) {
      if (op.startsWith("POST") || op.startsWith("PUT")) {
        if (op.endsWith("/keys")) continue;
        expect((await send(op, path, { headers, body: "{" })).status, op).toBe(400);
      }
      if (op.includes("{")) {
        const at = op.endsWith("/keys")
          ? path.replace(/\/[^/]+\/keys$/, "/%E0%A4%A/keys")
          : path.replace(/\/[^/]+$/, "/%E0%A4%A");
        const res = await send(op, at, { headers, ...(takesBody(op) ? { body: "{}" } : {}) });
        expect(res.status, `${op} ${res.text}`).toBe(400);
      }
    }
    for (const i of INFERENCE) {
      const res = await send(post(i.path), i.path, {
        headers: user(),
        body: JSON.stringify({ ...i.body(MODEL), tier: 3 }),
      });
      expect(res.code, i.path).toBe("tier_not_allowed");
      const unknown = await send(post(i.path), i.path, {
        headers: user(),
        body: JSON.stringify(i.body("no-such-model")),
      });
      expect(unknown.code, i.path).toBe("unknown_model");
    }
    expect(
      (await send("GET /v1/models/{model}", "/v1/models/no-such-model", { headers: user() })).code,
    ).toBe("unknown_model");
    const session = (body: object, key = API_KEY) =>
      send("POST /v1/sessions", "/v1/sessions", { headers: user(key), body: JSON.stringify(body) });
    expect((await session({ model: MODEL }, NO_T4_KEY)).code).toBe("tier_not_allowed");
    expect((await session({ model: "no-such-model" })).code).toBe("unknown_model");
    expect(
      (await send("DELETE /v1/sessions/{id}", "/v1/sessions/no-such-session", { headers: user() }))
        .code,
    ).toBe("session_not_found");
    const attestation = (path: string) =>
      send("GET /v1/attestation/{node_id}", path, { headers: user() });
    expect((await attestation("/v1/attestation/t4?nonce=xyz")).code).toBe("invalid_request");
    expect((await attestation("/v1/attestation/no-such-node")).code).toBe("not_found");
    expect((await attestation("/v1/attestation/h100-a")).code).toBe("not_found");
    const job = (request: object) =>
      send("POST /v1/jobs", "/v1/jobs", { headers: user(), body: JSON.stringify({ request }) });
    const messages = [{ role: "user", content: "hi" }];
    expect((await job({ model: MODEL, messages, tier: 3 })).code).toBe("tier_not_allowed");
    expect((await job({ model: "no-such-model", messages })).code).toBe("unknown_model");
    expect(
      (await send("GET /v1/jobs/{id}", "/v1/jobs/no-such-job", { headers: user() })).code,
    ).toBe("not_found");
    for (const kind of ADMIN_KINDS) {
      const op = (m: string) => `${m} /admin/v1/${kind}/{key}`;
      const path = `/admin/v1/${kind}/${"k".repeat(300)}`;
      expect((await send(op("GET"), path, { headers: admin() })).code, kind).toBe(
        "invalid_request",
      );
      const missing = `/admin/v1/${kind}/no-such-key`;
      expect((await send(op("GET"), missing, { headers: admin() })).code, kind).toBe("not_found");
      expect((await send(op("DELETE"), missing, { headers: admin() })).code, kind).toBe(
        "not_found",
      );
    }
    const measurement = { model: "no-such-model", tier: 4, mrtd: MRTD };
    expect(
      (
        await send("PUT /admin/v1/measurements/{key}", "/admin/v1/measurements/m-x", {
          headers: admin(),
          body: JSON.stringify(measurement),
        })
      ).code,
    ).toBe("unknown_model");
    expect(
      (
        await send("POST /admin/v1/accounts/{key}/keys", "/admin/v1/accounts/no-such/keys", {
          headers: admin(),
        })
      ).code,
    ).toBe("not_found");
    expect(
      (
        await send(
          "POST /admin/v1/accounts/{key}/keys",
          `/admin/v1/accounts/${"k".repeat(99)}/keys`,
          {
            headers: admin(),
          },
        )
      ).code,
    ).toBe("invalid_request");
  }, 120_000);

  it("what nodes answer: 502, 503, 504, and their own 4xx relayed", async () => {
    const all = (model: string) =>
      Promise.all(
        INFERENCE.map((i) =>
          send(post(i.path), i.path, { headers: user(), body: JSON.stringify(i.body(model)) }),
        ),
      );
    const times = INFERENCE.length;
    const faulted = async (node: (typeof FAULTY)[number], f: SimFault, codes: string[]) => {
      stack.sims.get(node)!.setFault(f);
      const answers = await all(modelOf(node));
      stack.sims.get(node)!.setFault(null);
      for (const a of answers) expect(codes, a.text).toContain(a.code ?? String(a.status));
    };
    await Promise.all([
      faulted("n-4xx", { kind: "status", status: 422, times }, ["422"]),
      faulted("n-5xx", { kind: "status", status: 500, times }, ["upstream_unavailable"]),
      faulted("n-hang", { kind: "hang", times }, ["gateway_timeout", "upstream_timeout"]),
    ]);
    for (const a of await all(ORPHAN_MODEL)) expect(a.code).toBe("no_node_available");
    const orphanSession = await send("POST /v1/sessions", "/v1/sessions", {
      headers: user(),
      body: JSON.stringify({ model: ORPHAN_MODEL }),
    });
    expect(orphanSession.code).toBe("no_node_available");
  }, 60_000);

  it("tier-4 sessions: a replayed sealed request (409), an expired session (410)", async () => {
    const s = await openSession();
    for (const i of INFERENCE.filter((x) => x.sealable)) {
      const bytes = sealedBytes(s, i.path, i.body(MODEL));
      await send(post(i.path), i.path, { headers: sealedHeaders(), body: bytes });
      const replay = await send(post(i.path), i.path, { headers: sealedHeaders(), body: bytes });
      expect(replay.code, `${i.path} ${replay.text}`).toBe("sealed_request_replayed");
    }
    const short = await openSession(1);
    await new Promise((r) => setTimeout(r, Math.max(0, short.expires_at - Date.now()) + 100));
    for (const i of INFERENCE.filter((x) => x.sealable)) {
      const bytes = sealedBytes(short, i.path, i.body(MODEL));
      const res = await send(post(i.path), i.path, { headers: sealedHeaders(), body: bytes });
      expect(res.code, `${i.path} ${res.text}`).toBe("session_expired");
    }
  }, 60_000);

  it("rate limits: an account's (429 rate_limited) and fresh nonces'", async () => {
    // The limited account's one token goes on the first request; everything after waits.
    await send("GET /v1/jobs/{id}", "/v1/jobs/spend", { headers: user(LIMITED_KEY) });
    const admitted = everyOperation().filter(
      (o) => o.headers.authorization === `Bearer ${API_KEY}` && !o.op.startsWith("GET /v1/models"),
    );
    for (const { op, path } of admitted) {
      const body = takesBody(op) ? { body: "{}" } : {};
      const res = await send(op, path, { headers: user(LIMITED_KEY), ...body });
      expect(res.code, op).toBe("rate_limited");
    }
    const nonce = `/v1/attestation/t4?nonce=${"ab".repeat(32)}`;
    await send("GET /v1/attestation/{node_id}", nonce, { headers: user() });
    const again = await send("GET /v1/attestation/{node_id}", nonce, { headers: user() });
    expect(again.code).toBe("rate_limited");
  }, 60_000);

  it("the authentication throttle: 429 auth_throttled on every operation, credentials or not", async () => {
    const throttled = freshAgent();
    for (let i = 0; i < 25; i++) {
      const res = await request(`${stack.intakeUrl}/v1/models`, {
        headers: bearer("wrong-key-0123456789"),
        dispatcher: throttled,
      });
      await res.body.dump();
    }
    for (const { op, path, headers } of everyOperation()) {
      const res = await send(op, path, { headers, agent: throttled });
      expect(res.code, op).toBe("auth_throttled");
    }
  }, 60_000);

  it("services that take a request and never answer: 504", async () => {
    const pid = (name: string) => stack.services.get(name)!.pid;
    process.kill(pid("dispatcher"), "SIGSTOP");
    process.kill(pid("attestation"), "SIGSTOP");
    try {
      const answers = await Promise.all([
        send("POST /v1/sessions", "/v1/sessions", {
          headers: user(),
          body: JSON.stringify({ model: MODEL }),
        }),
        send("DELETE /v1/sessions/{id}", "/v1/sessions/some-session", { headers: user() }),
        send("GET /v1/attestation/{node_id}", "/v1/attestation/t4", { headers: user() }),
      ]);
      expect(answers.map((a) => a.code)).toEqual([
        "gateway_timeout",
        "gateway_timeout",
        "gateway_timeout",
      ]);
    } finally {
      process.kill(pid("dispatcher"), "SIGCONT");
      process.kill(pid("attestation"), "SIGCONT");
    }
  }, 60_000);

  it("a stopping intake: 503 shutting_down on a kept-alive connection", async () => {
    const slowNode = stack.sims.get("n-slow")!;
    // One connection per operation, busy with a slow answer when the drain begins; the
    // operation's request goes out on it after that answer.
    const ops = [
      { op: "GET /v1/attestation", path: "/v1/attestation", headers: {} },
      { op: "GET /v1/models", path: "/v1/models", headers: user() },
    ];
    slowNode.setFault({ kind: "slow_first_token", delayMs: 2_000, times: ops.length });
    const intake = stack.services.get("intake")!;
    const kept = ops.map(() => new Agent({ connections: 1, pipelining: 1 }));
    agents.push(...kept);
    const slow = kept.map((agent) =>
      request(`${stack.intakeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: user(),
        body: JSON.stringify({ model: "m-slow", messages: [{ role: "user", content: "hi" }] }),
        dispatcher: agent,
      }).then((r) => r.body.dump()),
    );
    await pollUntil(() => slowNode.stats().payloads_received >= ops.length || undefined, {
      message: "slow answers under way",
    });
    const stopped = intake.stop("SIGTERM", 10_000);
    const late = ops.map(({ op, path, headers }, i) =>
      send(op, path, { headers, agent: kept[i]! }).catch((err: unknown) => err as Error),
    );
    await Promise.all(slow);
    const answers = await Promise.all(late);
    await stopped;
    stack.services.delete("intake");
    slowNode.setFault(null);
    for (const a of answers) {
      if (a instanceof Error) throw a;
      expect(a.code).toBe("shutting_down");
    }
    await stack.startService("intake");
    // Connections to the stopped intake are gone with it.
    await main.close();
    main = new Agent();
  }, 60_000);

  it("the bus gone: 503 on every operation that needs it", async () => {
    await stack.nats.stop();
    // Past ZML_KEY_STORE_MAX_STALE_MS, no API key can be judged; the admin store is away.
    await new Promise((r) => setTimeout(r, 600));
    for (const { op, path, headers } of everyOperation()) {
      if (op === "GET /v1/attestation") continue;
      const body = takesBody(op) && !op.startsWith("DELETE") ? { body: "{}" } : {};
      const res = await send(op, path, { headers, ...body });
      expect(res.status, `${op} ${res.text}`).toBe(503);
    }
  }, 60_000);
});

describe("the served /openapi.json", () => {
  it("has no admin resource this test leaves out", () => {
    const served = new Set(
      Object.keys(doc.paths)
        .map((path) => /^\/admin\/v1\/([a-z-]+)$/.exec(path)?.[1])
        .filter((kind) => kind !== undefined),
    );
    expect([...served].sort()).toEqual([...ADMIN_KINDS].sort());
  });

  it("documents every status answered, for its method and path, with the code answered", () => {
    const undocumented: string[] = [];
    for (const [op, byStatus] of seen) {
      const [method, path] = op.split(" ") as [string, string];
      const responses = doc.paths[path]?.[method.toLowerCase()]?.responses;
      expect(responses, op).toBeDefined();
      for (const [status, codes] of byStatus) {
        if (Number(status) < 400) continue;
        const response = responses![status] ?? responses![`${status[0]}XX`];
        if (response === undefined) {
          undocumented.push(`${op} ${status}`);
          continue;
        }
        const listed = (response["x-zml-error-codes"] as string[] | undefined) ?? [];
        for (const code of codes) {
          if (code === "(node)" && responses![`${status[0]}XX`] !== undefined) continue;
          if (!listed.includes(code)) undocumented.push(`${op} ${status} ${code}`);
        }
      }
    }
    expect(undocumented).toEqual([]);
  });

  it("lists no status this test did not provoke, unless no input can make it", () => {
    const unprovoked: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of ["get", "put", "post", "delete"]) {
        const responses = item[method]?.responses;
        if (responses === undefined) continue;
        const op = `${method.toUpperCase()} ${path}`;
        for (const status of Object.keys(responses).filter((s) => /^[45]/.test(s))) {
          if (NOT_PROVOKED[`* ${status}`] ?? NOT_PROVOKED[`${op} ${status}`]) continue;
          const answered = [...(seen.get(op)?.keys() ?? [])];
          const hit = status.endsWith("XX")
            ? answered.some((s) => s[0] === status[0] && responses[s] === undefined)
            : answered.includes(status);
          if (!hit) unprovoked.push(`${op} ${status}`);
        }
      }
    }
    expect(unprovoked).toEqual([]);
  });
});
