// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and wires the dispatcher together.
import { connectBus, openKv, watchKvIntoMap } from "@zml/bus";
import {
  DISPATCHER_QUEUE_GROUP,
  KV_BUCKETS,
  NodeSpecSchema,
  NodeStateSchema,
  PolicySpecSchema,
  ROUTE_REQUEST_SUBJECT,
} from "@zml/contracts";
import { onShutdownSignal } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { loadConfig } from "./config.ts";
import { createFleetView } from "./fleet-view.ts";
import { createRouteHandler } from "./handle-route.ts";
import { createDispatcherMetrics } from "./metrics.ts";
import { createNodePools } from "./node-pools.ts";

// Tracing is instrumented by hand, so the SDK only has to be up before the first message.
const telemetry = startTelemetry({ serviceName: "zml-dispatcher", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "dispatcher", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "dispatcher" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-dispatcher", log });

const [nodes, states, policies] = await Promise.all([
  openKv(bus, KV_BUCKETS.nodes).then((kv) => watchKvIntoMap(kv, { schema: NodeSpecSchema, log })),
  openKv(bus, KV_BUCKETS.nodeState).then((kv) => watchKvIntoMap(kv, { schema: NodeStateSchema, log })),
  openKv(bus, KV_BUCKETS.policies).then((kv) =>
    watchKvIntoMap(kv, { schema: PolicySpecSchema, log }),
  ),
]);
const view = createFleetView({ nodes: nodes.map, states: states.map, policies: policies.map });
const pools = createNodePools({
  connections: config.DISPATCH_POOL_CONNECTIONS,
  connectTimeoutMs: config.DISPATCH_CONNECT_TIMEOUT_MS,
});
const handle = createRouteHandler({
  bus,
  view,
  pools,
  config,
  log,
  metrics: createDispatcherMetrics(registry),
  clock: Date.now,
  random: Math.random,
});
const subscription = bus.nc.subscribe(ROUTE_REQUEST_SUBJECT, {
  queue: DISPATCHER_QUEUE_GROUP,
  callback: (err, msg) => {
    if (err) {
      log.error({ err: String(err) }, "route subscription error");
      return;
    }
    handle(msg).catch((e: unknown) => log.error({ err: String(e) }, "route handler failed"));
  },
});

const ops = await startOpsServer({
  host: config.DISPATCHER_OPS_HOST,
  port: config.DISPATCHER_OPS_PORT,
  registry,
  isReady: () => bus.isConnected(),
  log,
});
log.info({ ops: ops.url, nodes: nodes.map.size }, "dispatcher ready");

onShutdownSignal(log, async () => {
  await subscription.drain();
  for (const w of [nodes, states, policies]) w.stop();
  await bus.drain();
  await pools.close();
  await ops.close();
  await telemetry.shutdown();
});
