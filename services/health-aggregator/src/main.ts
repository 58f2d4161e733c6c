// Composition root of the health aggregator: polls every registered node, runs each
// through the health state machine and publishes `node.state` plus the KV snapshot.
import { connectBus, openKv, publishJson, subscribeJson, watchKvIntoMap } from "@zml/bus";
import {
  KV_BUCKETS,
  NODE_OBSERVATION_ALL,
  NodeObservationSchema,
  NodeSpecSchema,
  NodeStateSchema,
  nodeStateSubject,
} from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import { onShutdownSignal } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { Agent } from "undici";
import { loadConfig } from "./config.ts";
import { createNodeRegistry } from "./node-registry.ts";
import type { HealthUpdate } from "./node-registry.ts";
import { createPollScheduler } from "./poll-scheduler.ts";
import { probeNode } from "./probe.ts";

const telemetry = startTelemetry({ serviceName: "zml-health-aggregator", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "health-aggregator", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "health-aggregator" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-health-aggregator", log });
const stateKv = await openKv(bus, KV_BUCKETS.nodeState);
const agent = new Agent({ keepAliveTimeout: config.POLL_INTERVAL_MS * 2, connections: 4 });
const table = createNodeRegistry(DEFAULT_HEALTH_CONFIG, config.HEARTBEAT_MS);

const publish = (nodeId: string, update: HealthUpdate) => {
  if (!update.publish) return;
  const state: NodeState = update.state;
  const text = JSON.stringify(NodeStateSchema.parse(state));
  stateKv.put(nodeId, text).catch((err: unknown) => {
    log.warn({ node: nodeId, err: String(err) }, "node state snapshot not written");
  });
  publishJson(bus, nodeStateSubject(nodeId), NodeStateSchema, state);
};

const scheduler = createPollScheduler({
  intervalMs: config.POLL_INTERVAL_MS,
  jitter: config.POLL_JITTER,
  concurrency: config.PROBE_CONCURRENCY,
  random: Math.random,
  poll: async (node) => {
    const probe = await probeNode(agent, node, config.PROBE_TIMEOUT_MS);
    const update = table.onProbe(node, probe, Date.now());
    if (update.publish) {
      log.debug({ node: node.id, status: update.state.status, ok: probe.ok }, "node state");
    }
    publish(node.id, update);
  },
});

const nodes = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.nodes), {
  schema: NodeSpecSchema,
  log,
  onChange: (key, value, map) => {
    if (value === undefined) {
      table.forget(key);
      stateKv.delete(key).catch(() => undefined);
    }
    scheduler.sync(map);
  },
});
scheduler.sync(nodes.map);

const observations = subscribeJson(
  bus,
  NODE_OBSERVATION_ALL,
  NodeObservationSchema,
  (obs) => {
    const update = table.onObservation(obs, Date.now());
    if (update) publish(obs.node_id, update);
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
log.info({ ops: ops.url, nodes: nodes.map.size }, "health-aggregator ready");

onShutdownSignal(log, async () => {
  scheduler.stop();
  nodes.stop();
  await observations.drain();
  await bus.drain();
  await agent.close();
  await ops.close();
  await telemetry.shutdown();
});
