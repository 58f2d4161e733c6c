// The health aggregator as main.ts composes it, in this process: a real nats-server with the
// service's own bus identity, the real prober (undici agents behind the node address policy),
// simulated vLLM and TGI nodes serving their real /health and Prometheus /metrics, and the
// Azure Retail Prices fake behind the spot-price feed. Asserts the service's job end to end:
// node states with the readings of each node's metrics, in KV and on the bus; a failing node
// demoted and readmitted; two replicas splitting the nodes and handing them over on stop; a
// spot price written to the costs bucket.
import {
  busOptionsOf,
  connectBus,
  decodeJson,
  encodeJson,
  ensureBusResources,
  openKv,
  subscribeJson,
} from "@zml/bus";
import type { Bus, Subscription } from "@zml/bus";
import { startAzurePricesFake } from "@zml/cloud-sim";
import type { AzureFake } from "@zml/cloud-sim";
import {
  CloudAccountSpecSchema,
  CloudSpotCostSchema,
  KV_BUCKETS,
  NODE_STATE_ALL,
  nodeAddressPolicyOf,
  NodeSpecSchema,
  NodeStateSchema,
  spotCostKey,
} from "@zml/contracts";
import type { NodeSpec, NodeState } from "@zml/contracts";
import { AZURE_SOURCE } from "@zml/cost-feed";
import { pollUntil, startNatsServer } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { startSimNode } from "@zml/node-sim";
import type { SimNode } from "@zml/node-sim";
import { createLogger, Registry } from "@zml/telemetry";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHealthAggregator } from "../src/app.ts";
import type { HealthAggregator } from "../src/app.ts";
import { loadConfig } from "../src/config.ts";
import { priceSourcesOf } from "../src/cost-feed.ts";
import { createNodeProber } from "../src/probe.ts";

const MODEL = "llama-3.1-8b-instruct";
const VLLM = "vllm-1";
const TGI = "tgi-1";
const POLL_MS = 200;
/**
 * Long against the test: a replica that stops must be dropped by the others because it
 * deleted its key, not because its heartbeat aged out.
 */
const REPLICA_TTL_MS = 20_000;
const AZURE_ACCOUNT = "azure-test";
const AZURE_SIZE = "Standard_ND96isr_H100_v5";
const quietLog = { info() {}, warn() {}, error() {} };

/** One replica as main.ts starts it, plus the probes it made (node ids, in call order). */
interface Replica {
  self: string;
  app: HealthAggregator;
  polls: string[];
  stopped: boolean;
  stop(): Promise<void>;
}

let nats: NatsServerHandle;
/** The test's own connection, on the harness identity (allowed everything). */
let bus: Bus;
let vllm: SimNode;
let tgi: SimNode;
let azure: AzureFake;
let broadcasts: Subscription;
const broadcast: NodeState[] = [];
const replicas: Replica[] = [];

/**
 * Wires one replica as main.ts does (config from the environment, the service's own bus
 * identity, the real prober, the cloud price clients), recording each probe it starts. The
 * recording wraps the real probe: every call still goes over HTTP to the node.
 */
async function startReplica(self: string): Promise<Replica> {
  const config = loadConfig({
    ...nats.serviceEnv("health-aggregator"),
    AGGREGATOR_REPLICA_ID: self,
    ZML_NODE_ALLOW_LOOPBACK: "true",
    POLL_INTERVAL_MS: String(POLL_MS),
    POLL_JITTER: "0",
    PROBE_TIMEOUT_MS: "1000",
    HEARTBEAT_MS: "1000",
    REPLICA_TTL_MS: String(REPLICA_TTL_MS),
    ISOLATION_BASE_MS: "400",
    ISOLATION_MAX_MS: "800",
    COST_FEED_AZURE_URL: azure.url,
  });
  const replica = config.AGGREGATOR_REPLICA_ID!;
  const appBus = await connectBus({
    ...busOptionsOf(config, "health-aggregator"),
    name: "zml-health-aggregator",
    log: quietLog,
  });
  const prober = createNodeProber({
    keepAliveMs: config.POLL_INTERVAL_MS * 2,
    timeoutMs: config.PROBE_TIMEOUT_MS,
    maxBodyBytes: config.PROBE_MAX_BODY_BYTES,
    nodeAddresses: nodeAddressPolicyOf(config),
  });
  const polls: string[] = [];
  const app = await startHealthAggregator({
    bus: appBus,
    config,
    self: replica,
    probe: (node: NodeSpec) => {
      polls.push(node.id);
      return prober.probe(node);
    },
    log: createLogger({ service: "health-aggregator-test", level: "silent" }),
    registry: new Registry(),
    clock: Date.now,
    random: Math.random,
    priceSources: priceSourcesOf(config),
  });
  const handle: Replica = {
    self: replica,
    app,
    polls,
    stopped: false,
    // As boot.serve's shutdown: the service, then afterStop (the prober), then the bus.
    async stop() {
      handle.stopped = true;
      await app.stop();
      await prober.close();
      await appBus.drain();
    },
  };
  replicas.push(handle);
  return handle;
}

async function registerNode(sim: SimNode, spec: Partial<NodeSpec>, order: number): Promise<void> {
  const nodes = await openKv(bus, KV_BUCKETS.nodes);
  const parsed = NodeSpecSchema.parse({
    id: sim.nodeId,
    endpoint: sim.url,
    accelerator_family: "H100",
    tier: 1,
    models: [MODEL],
    registered_at: order,
    ...spec,
  });
  await nodes.put(parsed.id, encodeJson(parsed.id, NodeSpecSchema, parsed));
}

async function storedState(nodeId: string): Promise<NodeState | undefined> {
  const kv = await openKv(bus, KV_BUCKETS.nodeState);
  const entry = await kv.get(nodeId);
  return entry?.operation === "PUT" ? decodeJson(nodeId, NodeStateSchema, entry.value) : undefined;
}

/** Polls the node-state bucket until the node's state satisfies `accept`. */
function waitForStored(
  nodeId: string,
  accept: (s: NodeState) => boolean,
  what: string,
): Promise<NodeState> {
  return pollUntil(
    async () => {
      const s = await storedState(nodeId);
      return s && accept(s) ? s : undefined;
    },
    { timeoutMs: 5_000, intervalMs: 50, message: `${nodeId}: ${what} in ${KV_BUCKETS.nodeState}` },
  );
}

/** Polls the states broadcast on `zml.node.state.*` (from `from` on) for one matching `accept`. */
function waitForBroadcast(
  nodeId: string,
  accept: (s: NodeState) => boolean,
  what: string,
  from = 0,
): Promise<NodeState> {
  return pollUntil(() => broadcast.slice(from).find((s) => s.node_id === nodeId && accept(s)), {
    timeoutMs: 5_000,
    message: `${nodeId}: ${what} on ${NODE_STATE_ALL}`,
  });
}

/** Holds `count` chat requests open on the node (its time to first token is long). */
function load(sim: SimNode, count: number, signal: AbortSignal): void {
  for (let i = 0; i < count; i++) {
    fetch(`${sim.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hold" }] }),
      signal,
    }).catch(() => undefined); // aborted by the test
  }
}

const pollsOf = (replica: Replica, nodeId: string) =>
  replica.polls.filter((id) => id === nodeId).length;

beforeAll(async () => {
  nats = await startNatsServer();
  bus = await connectBus({ ...nats.client(), name: "health-aggregator-app-test", log: quietLog });
  // What `zml apply` does as admin when a bus is set up: the service may only bind to the
  // buckets it reads and writes, never create them.
  await ensureBusResources(bus);

  azure = await startAzurePricesFake();
  azure.setMeter({
    armRegionName: "eastus",
    armSkuName: AZURE_SIZE,
    skuName: "ND96isr H100 v5 Spot",
    productName: "Virtual Machines NDsr H100 v5 Series",
    retailPrice: 24, // 3 USD per GPU-hour on 8 GPUs
  });
  // A first token that never comes in the test: requests sent hold their slots.
  vllm = await startSimNode({
    nodeId: VLLM,
    flavour: "vllm",
    models: [MODEL],
    maxConcurrency: 2,
    ttftMs: 60_000,
  });
  tgi = await startSimNode({
    nodeId: TGI,
    flavour: "tgi",
    models: [MODEL],
    maxConcurrency: 1,
    ttftMs: 60_000,
  });
  await registerNode(
    vllm,
    {
      framework: "vllm",
      cloud: {
        account: AZURE_ACCOUNT,
        region: "eastus",
        instance_type: AZURE_SIZE,
        gpus_per_instance: 8,
      },
    },
    0,
  );
  await registerNode(tgi, { framework: "tgi" }, 1);

  broadcasts = subscribeJson(
    bus,
    NODE_STATE_ALL,
    NodeStateSchema,
    (state) => {
      broadcast.push(state);
    },
    { log: quietLog },
  );
  await bus.flush();
  // The replica ids split the two nodes one each (rendezvous hashing is deterministic).
  await startReplica("agg-a");
}, 20_000);

afterAll(async () => {
  broadcasts?.unsubscribe();
  await Promise.allSettled(replicas.filter((r) => !r.stopped).map((r) => r.stop()));
  await bus?.drain().catch(() => undefined);
  await Promise.allSettled([vllm?.close(), tgi?.close(), azure?.close()]);
  await nats?.stop();
});

// Past the 5 s default: a step may poll for up to 5 s, so its own message says what was missing.
describe("startHealthAggregator", { timeout: 15_000 }, () => {
  it("publishes each node Active with the readings of its own /metrics, in KV and on the bus", async () => {
    const held = new AbortController();
    load(vllm, 3, held.signal); // 2 running, 1 waiting
    load(tgi, 2, held.signal); // 1 running, 1 waiting
    await pollUntil(() => vllm.stats().in_flight === 3 && tgi.stats().in_flight === 2, {
      message: "the held requests on the nodes",
    });

    const loaded = (running: number, waiting: number) => (s: NodeState) =>
      s.status === "Active" && s.running === running && s.waiting === waiting;
    const vllmState = await waitForStored(VLLM, loaded(2, 1), "Active, 2 running, 1 waiting");
    expect(vllmState).toMatchObject({
      probe_pending: false,
      queue_depth: 3,
      kv_cache_usage: 1, // the sim's cache fills with the share of slots in use
      consecutive_failures: 0,
      last_error: null,
      instance_id: vllm.instanceId,
    });
    const tgiState = await waitForStored(TGI, loaded(1, 1), "Active, 1 running, 1 waiting");
    expect(tgiState).toMatchObject({
      probe_pending: false,
      queue_depth: 2,
      kv_cache_usage: null, // TGI reports none
      consecutive_failures: 0,
      instance_id: tgi.instanceId,
    });
    expect(vllm.instanceId).not.toBe(tgi.instanceId);
    // The same readings went out on zml.node.state.<node>.
    await waitForBroadcast(VLLM, loaded(2, 1), "Active, 2 running, 1 waiting");
    const sent = await waitForBroadcast(TGI, loaded(1, 1), "Active, 1 running, 1 waiting");
    expect(sent.instance_id).toBe(tgi.instanceId);

    held.abort();
    await pollUntil(() => vllm.stats().in_flight === 0 && tgi.stats().in_flight === 0, {
      message: "the held requests to end",
    });
    await waitForStored(VLLM, loaded(0, 0), "Active and idle again");
  });

  it("demotes a node whose health endpoint fails, isolates it after three, readmits it", async () => {
    await waitForStored(TGI, (s) => s.status === "Active", "Active");
    const from = broadcast.length;
    tgi.setFault({ kind: "health_fail" });
    // Degraded at the first failure, Isolated at the third in a row (DEFAULT_HEALTH_CONFIG).
    const degraded = await waitForBroadcast(TGI, (s) => s.status !== "Active", "demoted", from);
    expect(degraded).toMatchObject({
      status: "Degraded",
      consecutive_failures: 1,
      last_error: "health endpoint answered 503: unhealthy",
    });
    const isolated = await waitForBroadcast(TGI, (s) => s.status === "Isolated", "Isolated", from);
    expect(isolated.consecutive_failures).toBe(3);
    await waitForStored(TGI, (s) => s.status === "Isolated", "Isolated");
    // The other node is not affected.
    expect((await storedState(VLLM))?.status).toBe("Active");

    tgi.setFault(null);
    const back = await waitForStored(
      TGI,
      (s) => s.status === "Active" && s.checked_at > isolated.checked_at,
      "Active again",
    );
    expect(back).toMatchObject({ probe_pending: false, consecutive_failures: 0, last_error: null });
  });

  it("splits the nodes between two replicas: each node is polled by exactly one", async () => {
    const [a] = replicas;
    const b = await startReplica("agg-b");
    const both = ["agg-a", "agg-b"];
    await pollUntil(
      () =>
        [a!, b].every(
          (r) => r.app.summary().replicas.join() === both.join() && r.app.summary().owned === 1,
        ),
      { timeoutMs: 5_000, message: "both replicas to see each other and own one node each" },
    );
    expect(a!.app.summary()).toMatchObject({ nodes: 2, owned: 1 });
    expect(b.app.summary()).toMatchObject({ nodes: 2, owned: 1 });

    // From here on, probes started: three rounds of each node.
    a!.polls.length = 0;
    b.polls.length = 0;
    await pollUntil(() => [VLLM, TGI].every((id) => pollsOf(a!, id) + pollsOf(b, id) >= 3), {
      timeoutMs: 5_000,
      message: "three polls of each node",
    });
    const pollers = (id: string) => [a!, b].filter((r) => pollsOf(r, id) > 0).map((r) => r.self);
    expect(pollers(VLLM)).toHaveLength(1);
    expect(pollers(TGI)).toHaveLength(1);
    expect([...pollers(VLLM), ...pollers(TGI)].sort()).toEqual(both);
  });

  it("a stopped replica leaves the set at once and the other takes its node over", async () => {
    const [a, b] = replicas;
    const taken = [VLLM, TGI].find((id) => pollsOf(b!, id) > 0)!;
    const aggregators = await openKv(bus, KV_BUCKETS.aggregators);
    expect((await aggregators.get("agg-b"))?.operation).toBe("PUT");
    await b!.stop();
    const stoppedAt = Date.now();
    const bPolls = b!.polls.length;
    // Its heartbeat key is gone, so the survivor re-hashes well before the TTL could expire.
    expect((await aggregators.get("agg-b"))?.operation ?? "absent").not.toBe("PUT");
    await pollUntil(
      () => a!.app.summary().replicas.join() === "agg-a" && a!.app.summary().owned === 2,
      { timeoutMs: 3_000, message: "agg-a alone, owning both nodes" },
    );
    expect(Date.now() - stoppedAt).toBeLessThan(REPLICA_TTL_MS / 4);

    const before = pollsOf(a!, taken);
    await pollUntil(() => pollsOf(a!, taken) >= before + 3, {
      timeoutMs: 5_000,
      message: `agg-a polling ${taken}`,
    });
    // Meanwhile the stopped replica made no probe at all.
    expect(b!.polls.length).toBe(bPolls);
    const from = broadcast.length;
    await waitForBroadcast(taken, (s) => s.status === "Active", "published by agg-a", from);
  });

  it("writes the spot price of a cloud account's node to the costs bucket", async () => {
    const [a] = replicas;
    const accounts = await openKv(bus, KV_BUCKETS.cloudAccounts);
    const account = CloudAccountSpecSchema.parse({
      id: AZURE_ACCOUNT,
      provider: "azure",
      account_id: "sub-test",
      regions: ["eastus"],
      credentials: { kind: "none" },
      refresh_interval_s: 5,
      max_price_age_s: 10,
    });
    await accounts.put(account.id, encodeJson(account.id, CloudAccountSpecSchema, account));
    const costs = await openKv(bus, KV_BUCKETS.costs);
    const key = spotCostKey(AZURE_ACCOUNT, VLLM);
    const entry = await pollUntil(
      async () => {
        const e = await costs.get(key);
        return e?.operation === "PUT" ? decodeJson(key, CloudSpotCostSchema, e.value) : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 100, message: `${key} in ${KV_BUCKETS.costs}` },
    );
    expect(entry).toMatchObject({
      kind: "cloud_spot",
      cloud_account: AZURE_ACCOUNT,
      family: "H100",
      nodes: [VLLM],
      usd_per_gpu_hour: 3,
      gpus_per_node: 8,
      max_age_ms: 10_000,
      source: AZURE_SOURCE,
    });
    expect(azure.filters().length).toBeGreaterThan(0);
    expect(a!.app.summary().costFeeds).toEqual([AZURE_ACCOUNT]);
  });

  it("stop() resolves, removes the replica from the set and ends its feeds", async () => {
    const [a] = replicas;
    const aggregators = await openKv(bus, KV_BUCKETS.aggregators);
    expect((await aggregators.get("agg-a"))?.operation).toBe("PUT");
    await a!.stop();
    expect((await aggregators.get("agg-a"))?.operation ?? "absent").not.toBe("PUT");
    expect(a!.app.summary().costFeeds).toEqual([]);
  });
});
