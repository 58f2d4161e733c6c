// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and hands the real parts to the dispatcher.
import { randomBytes } from "node:crypto";
import { busOptionsOf, connectBus } from "@zml/bus";
import { onShutdownSignal, reportStartupErrors } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { startDispatcher } from "./app.ts";
import { loadConfig } from "./config.ts";
import { loadNodeSecrets } from "./secrets.ts";

reportStartupErrors("zml-dispatcher");
// Tracing is instrumented by hand, so the SDK only has to be up before the first message.
const telemetry = startTelemetry({ serviceName: "zml-dispatcher", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "dispatcher", level: config.LOG_LEVEL });
const secrets = loadNodeSecrets(config.ZML_NODE_SECRETS_FILE);
const { registry } = createMetrics({ service: "dispatcher" });
const bus = await connectBus({
  ...busOptionsOf(config, "dispatcher"),
  name: "zml-dispatcher",
  log,
});

const dispatcher = await startDispatcher({
  bus,
  config,
  log,
  registry,
  secrets,
  clock: Date.now,
  random: Math.random,
  randomHex: (bytes) => randomBytes(bytes).toString("hex"),
});
const ops = await startOpsServer({
  registry,
  isReady: () => bus.isConnected(),
  host: config.DISPATCHER_OPS_HOST,
  port: config.DISPATCHER_OPS_PORT,
  log,
});
log.info({ ops: ops.url, nodes: dispatcher.nodeCount }, "dispatcher ready");

onShutdownSignal(log, async () => {
  await dispatcher.stop();
  await bus.drain();
  await ops.close();
  await telemetry.shutdown();
});
