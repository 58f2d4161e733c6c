// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and hands the real parts to the dispatcher.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { busOptionsOf, connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { createShutdown, reportStartupErrors, startWhenPossible } from "@zml/runtime";
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
import { loadNodeSecrets } from "./node/secrets.ts";

reportStartupErrors("zml-dispatcher");
// Tracing is instrumented by hand, so the SDK only has to be up before the first message.
const telemetry = startTelemetry({ serviceName: "zml-dispatcher", env: process.env });
const config = loadConfig(process.env);
const host = hostname()
  .replace(/[^A-Za-z0-9_-]/g, "_")
  .slice(0, 40);
const replica =
  config.DISPATCHER_REPLICA_ID ?? `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
const log = createLogger({ service: "dispatcher", level: config.LOG_LEVEL }).child({ replica });
const shutdown = createShutdown(log, config);
const secrets = loadNodeSecrets(config.ZML_NODE_SECRETS_FILE);
const { registry } = createMetrics({ service: "dispatcher" });
// Filled in as start-up gets there. The ops server comes first: while NATS or JetStream is
// away it answers not-ready, and the dispatcher keeps trying to start instead of exiting
// (no crash loop under an orchestrator). A signal before the start is done exits at once.
const started: { bus?: Bus; dispatcher?: Dispatcher } = {};
const ops = await startOpsServer({
  registry,
  isReady: () =>
    !shutdown.stopping && started.dispatcher !== undefined && started.bus?.isConnected() === true,
  host: config.DISPATCHER_OPS_HOST,
  port: config.DISPATCHER_OPS_PORT,
  log,
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
        replica,
      }),
    ),
  { what: "dispatcher", log },
);
started.dispatcher = dispatcher;
log.info({ ops: ops.url, nodes: dispatcher.nodeCount }, "dispatcher ready");

shutdown.onStop(async (context) => {
  await dispatcher.stop(context);
  await bus.drain();
  await ops.close();
  await telemetry.shutdown();
});
