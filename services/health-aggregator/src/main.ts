// Composition root of the health aggregator: joins the replica set, polls the registered
// nodes this replica owns, runs each through the health state machine and publishes
// `node.state` plus the KV snapshot.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { connectBus, openKv, publishJson, subscribeJson, watchKvIntoMap } from "@zml/bus";
import {
  isTeeTier,
  KV_BUCKETS,
  NODE_OBSERVATION_ALL,
  NodeObservationBatchSchema,
  NodeObservationSchema,
  NodeSpecSchema,
  NodeStateSchema,
  nodeStateSubject,
  createNodeAddressPolicy,
} from "@zml/contracts";
import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import { guardedConnector, onShutdownSignal, reportStartupErrors } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { Agent } from "undici";
import { createAggregator } from "./aggregator.ts";
import { z } from "zod";
import { loadConfig } from "./config.ts";
import { joinReplicaSet } from "./membership.ts";
import { createAggregatorMetrics } from "./metrics.ts";
import { createNodeRegistry } from "./node-registry.ts";
import { probeNode } from "./probe.ts";

reportStartupErrors("zml-health-aggregator");
const telemetry = startTelemetry({ serviceName: "zml-health-aggregator", env: process.env });
const config = loadConfig(process.env);
const self =
  config.AGGREGATOR_REPLICA_ID ??
  `${hostname()
    .replace(/[^A-Za-z0-9_-]/g, "_")
    .slice(0, 40)}-${process.pid}-${randomBytes(3).toString("hex")}`;
const log = createLogger({ service: "health-aggregator", level: config.LOG_LEVEL }).child({
  replica: self,
});
const { registry } = createMetrics({ service: "health-aggregator" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-health-aggregator", log });
const nodeAddresses = createNodeAddressPolicy({
  allow: config.ZML_NODE_ALLOW_CIDRS,
  deny: config.ZML_NODE_DENY_CIDRS,
});
const agent = new Agent({
  keepAliveTimeout: config.POLL_INTERVAL_MS * 2,
  connections: 4,
  connect: guardedConnector(nodeAddresses),
});
// Tier 3/4 nodes present a TLS key their quote vouches for, not a CA-issued certificate.
// Health polls carry no payload, so they need not pin it (the dispatcher does); they only
// must not refuse the certificate.
const teeAgent = new Agent({
  keepAliveTimeout: config.POLL_INTERVAL_MS * 2,
  connections: 4,
  connect: guardedConnector(nodeAddresses, { rejectUnauthorized: false }),
});
const healthConfig = {
  ...DEFAULT_HEALTH_CONFIG,
  isolationBaseMs: config.ISOLATION_BASE_MS,
  isolationMaxMs: config.ISOLATION_MAX_MS,
  errorWindowMs: config.ERROR_WINDOW_MS,
};

const stateKv = await openKv(bus, KV_BUCKETS.nodeState);
// The last published state of every node, read when this replica takes a node over.
const snapshots = await watchKvIntoMap(stateKv, { schema: NodeStateSchema, log });

const aggregator = createAggregator({
  self,
  table: createNodeRegistry(healthConfig, config.HEARTBEAT_MS),
  probe: (node) =>
    probeNode(isTeeTier(node.tier) ? teeAgent : agent, node, {
      timeoutMs: config.PROBE_TIMEOUT_MS,
      maxBodyBytes: config.PROBE_MAX_BODY_BYTES,
    }),
  snapshot: (nodeId) => snapshots.map.get(nodeId),
  publish: (state) => {
    stateKv
      .put(state.node_id, JSON.stringify(NodeStateSchema.parse(state)))
      .catch((err: unknown) => {
        log.warn({ node: state.node_id, err: String(err) }, "node state snapshot not written");
      });
    publishJson(bus, nodeStateSubject(state.node_id), NodeStateSchema, state);
  },
  retract: (nodeId) => {
    stateKv.delete(nodeId).catch(() => undefined);
  },
  metrics: createAggregatorMetrics(registry),
  log,
  clock: Date.now,
  schedule: {
    intervalMs: config.POLL_INTERVAL_MS,
    jitter: config.POLL_JITTER,
    concurrency: config.PROBE_CONCURRENCY,
    random: Math.random,
  },
});

// Members first: a replica that loaded the nodes before it knew its peers would poll them all.
const membership = await joinReplicaSet({
  kv: await openKv(bus, KV_BUCKETS.aggregators),
  self,
  ttlMs: config.REPLICA_TTL_MS,
  clock: Date.now,
  isConnected: () => bus.isConnected(),
  log,
  onChange: (replicas) => aggregator.setReplicas(replicas),
});
aggregator.setReplicas(membership.replicas());

let nodesLoaded = false;
const nodes = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.nodes), {
  schema: NodeSpecSchema,
  log,
  onChange: (_key, _value, map) => {
    if (nodesLoaded) aggregator.setNodes(map);
  },
});
nodesLoaded = true;
aggregator.setNodes(nodes.map);

// Dispatchers send observations one by one (v1) or gathered per node (batch v1).
const observations = subscribeJson(
  bus,
  NODE_OBSERVATION_ALL,
  z.union([NodeObservationSchema, NodeObservationBatchSchema]),
  (msg) => {
    if (msg.type === "node.observation.v1") aggregator.observe(msg);
    else for (const obs of msg.observations) aggregator.observe(obs);
  },
  { log },
);

const ops = await startOpsServer({
  host: config.AGGREGATOR_OPS_HOST,
  port: config.AGGREGATOR_OPS_PORT,
  registry,
  isReady: () => bus.isConnected(),
  log,
});
log.info(
  {
    ops: ops.url,
    nodes: nodes.map.size,
    owned: aggregator.owned().size,
    replicas: membership.replicas(),
  },
  "health-aggregator ready",
);

onShutdownSignal(log, async () => {
  // Leaving first hands this replica's nodes to the others at once instead of after the TTL.
  await membership.leave();
  aggregator.stop();
  nodes.stop();
  snapshots.stop();
  await observations.drain();
  await bus.drain();
  await agent.close();
  await teeAgent.close();
  await ops.close();
  await telemetry.shutdown();
});
