// Replays, against a stack on the generated authorization, each attack that would work
// on an open bus: every one must now fail with a permissions error and change nothing.
import { Kvm } from "@nats-io/kv";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { connectBus, createHeaders, natsConnectionOf } from "@zml/bus";
import type { Bus, NatsConnection } from "@zml/bus";
import {
  ATTESTATION_RESULTS_BUCKET,
  ErrorBodySchema,
  HEADERS,
  KV_BUCKETS,
  MESSAGE_TYPES,
  NODE_COOLDOWN_SUBJECT,
  REPLY_KINDS,
  ROUTE_REQUEST_SUBJECT,
  attestationResultSubject,
  jobSubmitSubject,
  nodeStateSubject,
  DISPATCHER_PLACEMENTS_ALL,
  dispatcherPlacementsSubject,
} from "@zml/contracts";
import {
  ProcessExitedError,
  pollUntil,
  repoRoot,
  startNatsServer,
  startProcess,
} from "@zml/harness";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { postChat } from "../support/http.ts";
import { startRecordingProxy } from "../support/recording-proxy.ts";
import type { RecordingProxy } from "../support/recording-proxy.ts";
import { MODEL, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const NODE = "h100-a";
const REVOCATION = { id: "rev-1", reason: "vendor advisory", advisory_id: "INTEL-SA-00837" };

let stack: Stack;
/** In front of the node: every request line that reached it. */
let nodeProxy: RecordingProxy;
/** The attacker's own server, where a rewritten endpoint would send prompts. */
let attackerServer: RecordingProxy;
const intruders: Intruder[] = [];

interface Intruder {
  bus: Bus;
  /** The raw connection: an attacker speaks plain NATS, not our typed helpers. */
  nc: NatsConnection;
  /** Errors the server sent this connection (permission violations among them). */
  errors: string[];
}

/** A connection holding one service's stolen credential. */
async function stolen(identity: string): Promise<Intruder> {
  const errors: string[] = [];
  const log = { info() {}, warn() {}, error: (o: object) => void errors.push(JSON.stringify(o)) };
  const bus = await connectBus({
    ...stack.nats.client(identity),
    name: `intruder-${identity}`,
    log,
  });
  const intruder = { bus, nc: natsConnectionOf(bus), errors };
  intruders.push(intruder);
  return intruder;
}

/** Waits for the server's permissions error about `what` on this connection. */
async function violation(intruder: Intruder, what: "Publish" | "Subscription", subject: string) {
  await intruder.nc.flush();
  const expected = `Permissions Violation for ${what} to \\"${subject}\\"`;
  await pollUntil(() => intruder.errors.some((e) => e.includes(expected)), {
    timeoutMs: 5_000,
    message: `${what} violation on ${subject}`,
  });
}

/** A bucket's whole contents as key → JSON text, read with the harness identity. */
async function snapshot(bucket: string): Promise<Map<string, string>> {
  const kv = await new Kvm(natsConnectionOf(stack.bus)).open(bucket);
  const out = new Map<string, string>();
  for await (const key of await kv.keys()) {
    const e = await kv.get(key);
    if (e?.operation === "PUT") out.set(key, e.string());
  }
  return out;
}

function routeHeaders(path: string, tier = 1) {
  const h = createHeaders();
  h.set(HEADERS.type, MESSAGE_TYPES.routeRequestV1);
  h.set(HEADERS.requestId, `forged-${path.length}`);
  h.set(HEADERS.model, MODEL);
  h.set(HEADERS.path, path);
  h.set(HEADERS.tier, String(tier));
  h.set(HEADERS.account, "e2e");
  h.set(HEADERS.deadline, String(Date.now() + 10_000));
  return h;
}

beforeAll(async () => {
  attackerServer = await startRecordingProxy();
  stack = await startActiveStack({ nodes: [{ nodeId: NODE, family: "H100" }] });
  // Route the node through a recording proxy, so the test sees every path that reaches it.
  nodeProxy = await startRecordingProxy(stack.sims.get(NODE)!.url);
  await stack.apply({
    ...stack.fleet,
    nodes: stack.fleet.nodes.map((n) => ({ ...n, endpoint: nodeProxy.url })),
  });
  await pollUntil(
    async () => (await postChat(stack.intakeUrl, chatBody())).routing?.node === NODE,
    { timeoutMs: 20_000, message: "routing through the recording proxy" },
  );
  const revocations = await new Kvm(natsConnectionOf(stack.bus)).open(KV_BUCKETS.revocations);
  await revocations.put(REVOCATION.id, JSON.stringify({ ...REVOCATION, revoked_at: Date.now() }));
});

afterAll(async () => {
  await Promise.allSettled(intruders.map((i) => i.bus.drain()));
  await stack?.stop();
  await nodeProxy?.close();
  await attackerServer?.close();
});

describe("an attacker on the network", () => {
  it("cannot connect anonymously, with or without TLS", async () => {
    const { caFile } = stack.nats.client("intake");
    const noAuth = { servers: stack.nats.url, reconnect: false, timeout: 5_000 };
    await expect(connect({ ...noAuth, tls: { caFile: caFile! } })).rejects.toThrow(
      /authorization violation/i,
    );
    // A plaintext client never gets as far as CONNECT: the server requires TLS.
    await expect(connect(noAuth)).rejects.toThrow();
  });
});

describe("a stolen intake credential", () => {
  it("cannot write attestations, revocations, nodes or accounts", async () => {
    const intake = await stolen("intake");
    const js = jetstream(intake.nc);
    for (const [bucket, key] of [
      [ATTESTATION_RESULTS_BUCKET, NODE],
      [KV_BUCKETS.revocations, REVOCATION.id],
      [KV_BUCKETS.nodes, NODE],
      [KV_BUCKETS.accounts, "attacker"],
    ] as const) {
      await expect(js.publish(`$KV.${bucket}.${key}`, "{}"), bucket).rejects.toThrow(
        /permissions violation/i,
      );
    }
  });

  it("cannot read other services' inboxes or the route requests themselves", async () => {
    const intake = await stolen("intake");
    for (const subject of ["_INBOX_dispatcher.>", "_INBOX_admin.>", ROUTE_REQUEST_SUBJECT]) {
      intake.nc.subscribe(subject);
      await violation(intake, "Subscription", subject);
    }
  });

  it("cannot make a node call any path but the inference ones: a forged Zml-Path never reaches it", async () => {
    const intake = await stolen("intake");
    const before = nodeProxy.seen.length;
    const reply = await intake.nc.request(ROUTE_REQUEST_SUBJECT, "{}", {
      headers: routeHeaders("/v1/fine_tuning/jobs"),
      timeout: 10_000,
    });
    expect(reply.headers?.get(HEADERS.replyKind)).toBe(REPLY_KINDS.error);
    expect(ErrorBodySchema.parse(JSON.parse(reply.string()))).toMatchObject({
      code: "invalid_request",
      param: HEADERS.path,
    });
    const reached = nodeProxy.seen.slice(before).filter((l) => !l.startsWith("GET /"));
    expect(reached).toEqual([]);
    expect(nodeProxy.seen.some((l) => l.includes("fine_tuning"))).toBe(false);
    // The refusal is logged by the dispatcher's process; its line reaches our pipe after the reply.
    await vi.waitFor(() => expect(stack.logs()).toContain('"msg":"route request refused"'));
  });
});

describe("a stolen dispatcher credential", () => {
  it("cannot write accounts or revocations, nor delete a revocation", async () => {
    const dispatcher = await stolen("dispatcher");
    const revocationsBefore = await snapshot(KV_BUCKETS.revocations);
    const accountsBefore = await snapshot(KV_BUCKETS.accounts);
    const kvm = new Kvm(dispatcher.nc);
    const accounts = await kvm.open(KV_BUCKETS.accounts);
    await expect(
      accounts.put("attacker", JSON.stringify({ id: "attacker", allowed_tiers: [1, 2, 3, 4] })),
    ).rejects.toThrow(/permissions violation/i);
    const revocations = await kvm.open(KV_BUCKETS.revocations);
    await expect(revocations.delete(REVOCATION.id)).rejects.toThrow(/permissions violation/i);
    await expect(revocations.purge(REVOCATION.id)).rejects.toThrow(/permissions violation/i);
    expect(await snapshot(KV_BUCKETS.revocations)).toEqual(revocationsBefore);
    expect(revocationsBefore.has(REVOCATION.id)).toBe(true);
    expect(await snapshot(KV_BUCKETS.accounts)).toEqual(accountsBefore);
  });

  it("cannot forge an attestation, by bucket or by broadcast", async () => {
    const dispatcher = await stolen("dispatcher");
    const before = await snapshot(ATTESTATION_RESULTS_BUCKET);
    const attestations = await new Kvm(dispatcher.nc).open(ATTESTATION_RESULTS_BUCKET);
    await expect(attestations.put(NODE, JSON.stringify({ ok: true, tier: 3 }))).rejects.toThrow(
      /permissions violation/i,
    );
    dispatcher.nc.publish(attestationResultSubject(NODE), "{}");
    await violation(dispatcher, "Publish", attestationResultSubject(NODE));
    expect(await snapshot(ATTESTATION_RESULTS_BUCKET)).toEqual(before);
  });

  it("cannot rewrite a node's endpoint: prompts keep going to the real node", async () => {
    const dispatcher = await stolen("dispatcher");
    const nodes = await new Kvm(dispatcher.nc).open(KV_BUCKETS.nodes);
    const spec = stack.fleet.nodes.find((n) => n.id === NODE)!;
    await expect(
      nodes.put(NODE, JSON.stringify({ ...spec, endpoint: attackerServer.url })),
    ).rejects.toThrow(/permissions violation/i);
    const before = nodeProxy.seen.length;
    for (let i = 0; i < 10; i++) {
      const res = await postChat(stack.intakeUrl, chatBody());
      expect(res.status).toBe(200);
      expect(res.routing?.node).toBe(NODE);
    }
    const inference = nodeProxy.seen.slice(before).filter((l) => l.includes("/v1/chat"));
    expect(inference).toHaveLength(10);
    expect(attackerServer.seen).toEqual([]);
    expect(JSON.parse((await snapshot(KV_BUCKETS.nodes)).get(NODE)!)).toMatchObject({
      endpoint: nodeProxy.url,
    });
  });

  it("can cool a node down only for a bounded time", async () => {
    const dispatcher = await stolen("dispatcher");
    const forever = {
      type: "node.cooldown.v2",
      node_id: NODE,
      duration_ms: 10 * 24 * 3600_000,
      reason: "forged",
      origin: "intruder",
    };
    dispatcher.nc.publish(NODE_COOLDOWN_SUBJECT, JSON.stringify(forever));
    await dispatcher.nc.flush();
    const dropped = (line: string) =>
      line.includes('"msg":"dropped invalid message"') &&
      line.includes(`"subject":"${NODE_COOLDOWN_SUBJECT}"`);
    await pollUntil(() => stack.logs().split("\n").some(dropped), {
      message: "the dispatcher dropping the unbounded cooldown",
    });
    expect((await postChat(stack.intakeUrl, chatBody())).status).toBe(200);
  });
});

describe("a stolen aggregator or attestation credential", () => {
  it("cannot publish route requests (no tier or key bypass) nor cooldowns", async () => {
    const aggregator = await stolen("health-aggregator");
    await expect(
      aggregator.nc.request(ROUTE_REQUEST_SUBJECT, chatBody(), {
        headers: routeHeaders("/v1/chat/completions", 3),
        timeout: 5_000,
      }),
    ).rejects.toThrow(/permissions violation/i);
    aggregator.nc.publish(NODE_COOLDOWN_SUBJECT, "{}");
    await violation(aggregator, "Publish", NODE_COOLDOWN_SUBJECT);
  });

  it("cannot steer prefix affinity, nor read where the replicas sent which prompt prefixes", async () => {
    for (const identity of ["health-aggregator", "intake"]) {
      const intruder = await stolen(identity);
      const subject = dispatcherPlacementsSubject("forged");
      intruder.nc.publish(subject, "{}");
      await violation(intruder, "Publish", subject);
      intruder.nc.subscribe(DISPATCHER_PLACEMENTS_ALL);
      await violation(intruder, "Subscription", DISPATCHER_PLACEMENTS_ALL);
    }
  });

  it("cannot answer intake's requests: a forged reply has nowhere to go", async () => {
    for (const identity of ["health-aggregator", "attestation"]) {
      const intruder = await stolen(identity);
      const inbox = "_INBOX_intake.forged.1";
      const h = createHeaders();
      h.set(HEADERS.replyKind, REPLY_KINDS.full);
      h.set(HEADERS.status, "200");
      h.set(HEADERS.routing, 'decision-id="forged", node="attacker", tier=3');
      intruder.nc.publish(inbox, '{"forged":true}', { headers: h });
      await violation(intruder, "Publish", inbox);
    }
    const res = await postChat(stack.intakeUrl, chatBody());
    expect(res.status).toBe(200);
    expect(res.routing?.node).toBe(NODE);
    expect(res.text).not.toContain("forged");
  });

  it("lets the aggregator publish node state but not write nodes; attestation can't delete revocations", async () => {
    const aggregator = await stolen("health-aggregator");
    aggregator.nc.publish(`${nodeStateSubject(NODE)}.x`, "{}");
    await violation(aggregator, "Publish", `${nodeStateSubject(NODE)}.x`);
    await expect(
      jetstream(aggregator.nc).publish(`$KV.${KV_BUCKETS.nodes}.${NODE}`, "{}"),
    ).rejects.toThrow(/permissions violation/i);
    const attestation = await stolen("attestation");
    const revocations = await new Kvm(attestation.nc).open(KV_BUCKETS.revocations);
    await expect(revocations.delete(REVOCATION.id)).rejects.toThrow(/permissions violation/i);
    expect((await snapshot(KV_BUCKETS.revocations)).has(REVOCATION.id)).toBe(true);
  });
});

describe("a batch producer", () => {
  it("queues jobs for its own account only", async () => {
    const producer = await stolen("batch-e2e");
    const js = jetstream(producer.nc);
    const h = createHeaders();
    h.set(HEADERS.type, "job.v1");
    h.set(HEADERS.model, MODEL);
    h.set(HEADERS.path, "/v1/chat/completions");
    const ack = await js.publish(jobSubmitSubject("e2e", "own-job-1"), chatBody(), {
      headers: h,
      msgID: "own-job-1",
    });
    expect(ack.stream).toBe("ZML_JOBS");
    await expect(
      js.publish(jobSubmitSubject("other", "their-job-1"), chatBody(), { headers: h }),
    ).rejects.toThrow(/permissions violation/i);
  });
});

describe("the services themselves", () => {
  it("did their jobs throughout without a single permissions violation", () => {
    const ours = stack.permissionViolations().filter((l) => /nats\.js:zml-/.test(l));
    expect(ours).toEqual([]);
    // …while the intruders above were refused, and the server said so.
    expect(stack.permissionViolations().some((l) => l.includes("intruder-"))).toBe(true);
  });
});

describe("a service on a bus that lets anyone in", () => {
  it("refuses to start, unless told NATS_INSECURE=1, which it logs as an error", async () => {
    await using open = await startNatsServer({ security: "open" });
    const start = (extra: Record<string, string>) =>
      startProcess({
        name: "health-aggregator",
        command: process.execPath,
        args: [join(repoRoot(), "services/health-aggregator/src/main.ts")],
        env: { NATS_URL: open.url, AGGREGATOR_OPS_PORT: "0", ...extra },
        readyLine: /"msg":"health-aggregator ready"/,
        readyTimeoutMs: 30_000,
      });
    // With no identity at all the config is refused before anything connects.
    const noIdentity = await start({}).catch((e: unknown) => e);
    expect(noIdentity).toBeInstanceOf(ProcessExitedError);
    expect((noIdentity as ProcessExitedError).output).toContain("NATS_NKEY_SEED_FILE");
    // With an identity, the open bus itself is refused.
    const seed = stack.nats.client("health-aggregator").nkeySeedFile!;
    const refused = await start({ NATS_NKEY_SEED_FILE: seed }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ProcessExitedError);
    expect((refused as ProcessExitedError).output).toContain("accepts anonymous clients");
    await using insecure = await start({ NATS_INSECURE: "1" });
    expect(insecure.output()).toMatch(/"level":"error",.*"msg":"INSECURE: /);
  });
});
