// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and hands the real parts to the dispatcher.
import { randomBytes } from "node:crypto";
import { busOptionsOf, connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  onShutdownSignal,
  reportStartupErrors,
  startWhenPossible,
  untilShutdown,
} from "@zml/runtime";
import {
  createLogger,
  createMetrics,
  startOpsServer,
  startTelemetry,
  withAttemptRegistry,
} from "@zml/telemetry";
import { startDispatcher } from "./app.ts";
import type { Dispatcher } from "./app.ts";
import { loadConfig } from "./config.ts";
import { loadNodeSecrets } from "./secrets.ts";

reportStartupErrors("zml-dispatcher");
// Tracing is instrumented by hand, so the SDK only has to be up before the first message.
const telemetry = startTelemetry({ serviceName: "zml-dispatcher", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "dispatcher", level: config.LOG_LEVEL });
const secrets = loadNodeSecrets(config.ZML_NODE_SECRETS_FILE);
const { registry } = createMetrics({ service: "dispatcher" });
// Filled in as start-up gets there; the ops server and the shutdown handler come first.
const started: { bus?: Bus; dispatcher?: Dispatcher } = {};
// The ops server first: while NATS or JetStream is away it answers not-ready, and the
// dispatcher keeps trying to start instead of exiting (no crash loop under an orchestrator).
const ops = await startOpsServer({
  registry,
  isReady: () => started.dispatcher !== undefined && started.bus?.isConnected() === true,
  host: config.DISPATCHER_OPS_HOST,
  port: config.DISPATCHER_OPS_PORT,
  log,
});
const starting = new AbortController();
onShutdownSignal(log, async () => {
  starting.abort(new Error("shutting down"));
  await started.dispatcher?.stop();
  await started.bus?.drain();
  await ops.close();
  await telemetry.shutdown();
});

const bus = await connectBus({
  ...busOptionsOf(config, "dispatcher"),
  name: "zml-dispatcher",
  log,
});
started.bus = bus;
const dispatcher = await startWhenPossible(
  () =>
    withAttemptRegistry(registry, (attemptRegistry) =>
      startDispatcher({
        bus,
        config,
        log,
        registry: attemptRegistry,
        secrets,
        clock: Date.now,
        random: Math.random,
        randomHex: (bytes) => randomBytes(bytes).toString("hex"),
      }),
    ),
  { what: "dispatcher", log, signal: starting.signal },
).catch(untilShutdown(starting.signal));
started.dispatcher = dispatcher;
log.info({ ops: ops.url, nodes: dispatcher.nodeCount }, "dispatcher ready");
