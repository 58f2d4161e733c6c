// The attestation app as main.ts composes it, in this process: a real nats-server with the
// service's own bus identity, the trust anchor through `loadTrust`, the real TLS quote fetch,
// and simulated TDX nodes serving quotes signed by a test PKI. Asserts the service's job end
// to end: background attestation published to KV and the bus, readiness, verify requests with
// a caller's nonce, revocations, and a stop that ends serving.
import { randomBytes } from "node:crypto";
import {
  busOptionsOf,
  connectBus,
  decodeJson,
  encodeJson,
  openKv,
  requestJson,
  subscribeJson,
} from "@zml/bus";
import type { Bus, Subscription } from "@zml/bus";
import { startBusRig } from "@zml/bus/testing";
import type { BusRig } from "@zml/bus/testing";
import {
  ApprovedMeasurementSchema,
  ATTESTATION_RESULT_ALL,
  ATTESTATION_RESULTS_BUCKET,
  ATTESTATION_VERIFY_ENDPOINT,
  AttestationResultSchema,
  KV_BUCKETS,
  NodeSpecSchema,
  RevocationSchema,
  ZmlError,
} from "@zml/contracts";
import type { AttestationResult, AttestationVerifyReply } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { createLogger, Registry } from "@zml/telemetry";
import { parseQuote, reportDataFor } from "@zml/tdx";
import { createTestTee, TEST_MRTD, TEST_RTMR3 } from "@zml/tdx/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAttestation } from "../src/app.ts";
import type { AttestationApp } from "../src/app.ts";
import { loadConfig } from "../src/config.ts";
import { fetchNodeQuote } from "../src/quote-fetch.ts";
import { loadTrust } from "../src/trust.ts";

const MODEL = "llama-3.1-8b-instruct";
const MRTD = TEST_MRTD;
const RTMR3 = TEST_RTMR3;
const ROGUE_MRTD = "ee".repeat(48);
const FMSPC = "30606a000000";
/** Never read from disk: `readText` below answers for this path only. */
const ROOT_PEM_FILE = "/etc/zml/test-tee-root.pem";
const quietLog = { info() {}, warn() {}, error() {} };

const testTee = createTestTee({ fmspc: FMSPC });
const { pki } = testTee;

let rig: BusRig;
/** The test's own connection, on the harness identity (allowed everything): `rig.bus`. */
let bus: Bus;
/** The app's connection, on the attestation service's identity, as main.ts makes it. */
let appBus: Bus;
let app: AttestationApp | undefined;
let appStopped = false;
let good: SimNode;
let rogue: SimNode;
let broadcasts: Subscription;
let intelRoot: boolean;
const broadcast: AttestationResult[] = [];

async function startTeeNode(nodeId: string, mrtd: string): Promise<SimNode> {
  return startSimNode({
    nodeId,
    flavour: "vllm",
    models: [MODEL],
    tee: testTee.nodeTee({ mrtd, rtmr3: RTMR3 }),
  });
}

async function registerNode(sim: SimNode, nodeId: string, order: number): Promise<void> {
  const nodes = await openKv(bus, KV_BUCKETS.nodes);
  const spec = NodeSpecSchema.parse(
    nodeSpec(nodeId, { endpoint: sim.url, tier: 3, models: [MODEL], registered_at: order }),
  );
  await nodes.put(nodeId, encodeJson(nodeId, NodeSpecSchema, spec));
}

async function storedResult(nodeId: string): Promise<AttestationResult | undefined> {
  const kv = await openKv(bus, ATTESTATION_RESULTS_BUCKET);
  const entry = await kv.get(nodeId);
  return entry?.operation === "PUT"
    ? decodeJson(nodeId, AttestationResultSchema, entry.value)
    : undefined;
}

/** Polls the results bucket until the node's result satisfies `accept`. */
function waitForStored(
  nodeId: string,
  accept: (r: AttestationResult) => boolean,
  what: string,
): Promise<AttestationResult> {
  return pollUntil(
    async () => {
      const r = await storedResult(nodeId);
      return r && accept(r) ? r : undefined;
    },
    {
      timeoutMs: 4_000,
      intervalMs: 50,
      message: `${nodeId}: ${what} in ${ATTESTATION_RESULTS_BUCKET}`,
    },
  );
}

/** Polls the results broadcast on `zml.attestation.result.*` for one matching `accept`. */
function waitForBroadcast(
  nodeId: string,
  accept: (r: AttestationResult) => boolean,
  what: string,
): Promise<AttestationResult> {
  return pollUntil(() => broadcast.find((r) => r.node_id === nodeId && accept(r)), {
    timeoutMs: 4_000,
    message: `${nodeId}: ${what} on ${ATTESTATION_RESULT_ALL}`,
  });
}

function verify(
  request: { node_id: string; nonce?: string; fresh?: boolean },
  timeoutMs = 4_000,
): Promise<AttestationVerifyReply> {
  return requestJson(
    bus,
    ATTESTATION_VERIFY_ENDPOINT,
    { type: "attestation.verify.v1", ...request },
    { timeoutMs, service: "the attestation service" },
  );
}

function resultOf(reply: AttestationVerifyReply): AttestationResult {
  if ("error" in reply)
    throw new Error(`verify answered ${reply.error.code}: ${reply.error.message}`);
  return reply.result;
}

beforeAll(async () => {
  // What `zml apply` does as admin when a bus is set up: the service may only bind to the
  // buckets it reads, never create them.
  rig = await startBusRig({ name: "attestation-app-test", createResources: true });
  bus = rig.bus;

  good = await startTeeNode("tee-good", MRTD);
  rogue = await startTeeNode("tee-rogue", ROGUE_MRTD);
  await registerNode(good, "tee-good", 0);
  await registerNode(rogue, "tee-rogue", 1);
  const measurements = await openKv(bus, KV_BUCKETS.measurements);
  const approved = { id: "llama-t3", model: MODEL, tier: 3, mrtd: MRTD, rtmr3: RTMR3 };
  await measurements.put(approved.id, encodeJson(approved.id, ApprovedMeasurementSchema, approved));

  broadcasts = subscribeJson(
    bus,
    ATTESTATION_RESULT_ALL,
    AttestationResultSchema,
    (result) => {
      broadcast.push(result);
    },
    { log: quietLog },
  );
  await bus.flush();

  // As main.ts: config from the environment, trust read once, the real fetch.
  const config = loadConfig({
    ...rig.nats.serviceEnv("attestation"),
    ATTESTATION_TRUST_ROOT_PEM_FILE: ROOT_PEM_FILE,
  });
  const trust = await loadTrust(config, (path) =>
    path === ROOT_PEM_FILE
      ? Promise.resolve(pki.root.pem)
      : Promise.reject(Object.assign(new Error(`no ${path}`), { code: "ENOENT" })),
  );
  intelRoot = trust.intelRoot;
  appBus = await connectBus({
    ...busOptionsOf(config, "attestation"),
    name: "zml-attestation",
    log: quietLog,
  });
  app = await startAttestation({
    bus: appBus,
    config,
    policy: trust.policy,
    fetchQuote: (node, nonce, options) =>
      fetchNodeQuote(node.endpoint, nonce, config.ATTESTATION_QUOTE_TIMEOUT_MS, options),
    log: createLogger({ service: "attestation-test", level: "silent" }),
    registry: new Registry(),
    clock: Date.now,
    randomHex: (bytes) => randomBytes(bytes).toString("hex"),
  });
}, 15_000);

afterAll(async () => {
  broadcasts?.unsubscribe();
  if (!appStopped) await app?.stop();
  await appBus?.drain().catch(() => undefined);
  await Promise.allSettled([good?.close(), rogue?.close()]);
  await rig?.stop();
});

describe("startAttestation", () => {
  it("trusts the configured test root, not Intel's", () => {
    expect(intelRoot).toBe(false);
  });

  it("is ready once started and counts the approved measurement", () => {
    expect(app!.isReady()).toBe(true);
    expect(app!.summary()).toEqual({ revocations: 0, measurements: 1 });
  });

  it("attests a node in the background: ok in the results bucket and on its subject", async () => {
    const stored = await waitForStored("tee-good", (r) => r.ok, "an ok result");
    expect(stored).toMatchObject({
      tier: 3,
      reason_code: null,
      approved_models: [MODEL],
      tcb_status: "UpToDate",
      measurement: { mrtd: MRTD, rtmr3: RTMR3 },
      endpoint: good.url,
      // The key the node serves TLS with, bound into the quote's REPORTDATA.
      tls_key_sha256: good.stats().tls_key_sha256,
      revocation: null,
    });
    expect(stored.expires_at).toBeGreaterThan(stored.verified_at);
    expect(parseQuote(stored.quote_b64!).body.reportdata).toBe(
      reportDataFor({ nonce: stored.nonce_hex!, tlsKeySha256: stored.tls_key_sha256! }),
    );
    // The same attestation (same service nonce) went out on zml.attestation.result.tee-good.
    const sent = await waitForBroadcast(
      "tee-good",
      (r) => r.ok && r.nonce_hex === stored.nonce_hex,
      "the stored ok result",
    );
    expect(sent).toEqual(stored);
    expect(good.stats()).toMatchObject({ payloads_received: 0 });
    expect(good.stats().quotes_served).toBeGreaterThan(0);
  });

  it("fails a node whose MRTD is not approved", async () => {
    const stored = await waitForStored("tee-rogue", (r) => !r.ok, "a failed result");
    expect(stored).toMatchObject({
      reason_code: "measurements",
      approved_models: [],
      measurement: { mrtd: ROGUE_MRTD },
      tls_key_sha256: null,
    });
    expect(stored.reason).toContain(ROGUE_MRTD);
    await waitForBroadcast("tee-rogue", (r) => r.reason_code === "measurements", "the failure");
  });

  it("answers a verify request with a caller's fresh nonce, bound into the quote", async () => {
    const cachedNonce = (await waitForStored("tee-good", (r) => r.ok, "an ok result")).nonce_hex;
    const served = good.stats().quotes_served ?? 0;
    const nonce = randomBytes(32).toString("hex");
    const result = resultOf(await verify({ node_id: "tee-good", nonce }));
    expect(result).toMatchObject({ ok: true, nonce_hex: nonce, approved_models: [MODEL] });
    expect(parseQuote(result.quote_b64!).body.reportdata).toBe(
      reportDataFor({ nonce, tlsKeySha256: good.stats().tls_key_sha256! }),
    );
    // A new quote was fetched for it, and a caller's nonce is never cached.
    expect(good.stats().quotes_served).toBeGreaterThan(served);
    expect((await storedResult("tee-good"))?.nonce_hex).toBe(cachedNonce);
  });

  it("fails the node once a revocation naming it is written", async () => {
    const revocations = await openKv(bus, KV_BUCKETS.revocations);
    const revocation = RevocationSchema.parse({
      id: "rev-guest-kernel",
      reason: "guest kernel CVE",
      node_id: "tee-good",
      revoked_at: Date.now(),
    });
    await revocations.put(revocation.id, encodeJson(revocation.id, RevocationSchema, revocation));
    const revoked = (r: AttestationResult) => !r.ok && r.reason_code === "revoked";
    const stored = await waitForStored("tee-good", revoked, "a revoked result");
    expect(stored.revocation).toEqual({ id: revocation.id, reason: revocation.reason });
    expect(stored.reason).toContain(revocation.reason);
    expect(stored.expires_at).toBeLessThanOrEqual(Date.now());
    await waitForBroadcast("tee-good", revoked, "the revoked result");
    expect(app!.summary()).toEqual({ revocations: 1, measurements: 1 });
    // A verify request is answered with the revoked result too.
    expect(resultOf(await verify({ node_id: "tee-good" }))).toMatchObject({
      ok: false,
      reason_code: "revoked",
    });
  });

  it("stops serving verify requests once stopped", async () => {
    appStopped = true;
    await app!.stop({ deadline: Date.now() + 2_000 });
    expect(app!.isReady()).toBe(false);
    const started = Date.now();
    const error = await verify({ node_id: "tee-good", fresh: true }, 1_000).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ZmlError);
    // The subscription is drained: the server answers "no responders" at once.
    expect(error).toMatchObject({
      code: "bus_unavailable",
      message: expect.stringContaining("not running"),
    });
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});
