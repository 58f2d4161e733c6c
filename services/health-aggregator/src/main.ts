// Composition root of the health aggregator: reads the environment, starts telemetry,
// connects to NATS and hands the real probe (HTTP through keep-alive agents) to the app.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { busOptionsOf, connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { createNodeAddressPolicy } from "@zml/contracts";
import { createShutdown, reportStartupErrors, startWhenPossible } from "@zml/runtime";
import {
  createLogger,
  createMetrics,
  startOpsServer,
  startTelemetry,
  withAttemptRegistry,
} from "@zml/telemetry";
import { createAwsSpotSource, createAzureSpotSource, createGcpSpotSource } from "@zml/cost-feed";
import { startHealthAggregator } from "./app.ts";
import type { HealthAggregator } from "./app.ts";
import { loadConfig } from "./config.ts";
import { createNodeProber } from "./probe.ts";

reportStartupErrors("zml-health-aggregator");
const telemetry = startTelemetry({ serviceName: "zml-health-aggregator", env: process.env });
const config = loadConfig(process.env);
const host = hostname()
  .replace(/[^A-Za-z0-9_-]/g, "_")
  .slice(0, 40);
const self =
  config.AGGREGATOR_REPLICA_ID ?? `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
const log = createLogger({ service: "health-aggregator", level: config.LOG_LEVEL }).child({
  replica: self,
});
const { registry } = createMetrics({ service: "health-aggregator" });
const shutdown = createShutdown(log, config);
// Filled in as start-up gets there. The ops server comes first: while NATS or JetStream is
// away it answers not-ready and start-up keeps trying, instead of exiting into an
// orchestrator's restart loop. A signal before the start is done exits at once.
const started: { bus?: Bus; aggregator?: HealthAggregator } = {};
const ops = await startOpsServer({
  host: config.AGGREGATOR_OPS_HOST,
  port: config.AGGREGATOR_OPS_PORT,
  registry,
  isReady: () =>
    !shutdown.stopping && started.aggregator !== undefined && started.bus?.isConnected() === true,
  log,
});
const bus = await connectBus({
  ...busOptionsOf(config, "health-aggregator"),
  name: "zml-health-aggregator",
  log,
});
const prober = createNodeProber({
  keepAliveMs: config.POLL_INTERVAL_MS * 2,
  timeoutMs: config.PROBE_TIMEOUT_MS,
  maxBodyBytes: config.PROBE_MAX_BODY_BYTES,
  nodeAddresses: createNodeAddressPolicy({
    allow: config.ZML_NODE_ALLOW_CIDRS,
    deny: config.ZML_NODE_DENY_CIDRS,
  }),
});

started.bus = bus;
const aggregator = await startWhenPossible(
  () =>
    withAttemptRegistry(registry, (attemptRegistry) =>
      startHealthAggregator({
        bus,
        config,
        self,
        probe: prober.probe,
        log,
        registry: attemptRegistry,
        clock: Date.now,
        random: Math.random,
        priceSources: config.COST_FEED_ENABLED
          ? {
              aws: createAwsSpotSource({
                endpoint: config.COST_FEED_AWS_ENDPOINT,
                maxAttempts: config.COST_FEED_AWS_MAX_ATTEMPTS,
              }),
              azure: createAzureSpotSource({ baseUrl: config.COST_FEED_AZURE_URL }),
              gcp: createGcpSpotSource({ baseUrl: config.COST_FEED_GCP_URL }),
            }
          : undefined,
      }),
    ),
  { what: "health-aggregator", log },
);
started.aggregator = aggregator;
log.info({ ops: ops.url, ...aggregator.summary() }, "health-aggregator ready");

shutdown.onStop(async () => {
  await aggregator.stop();
  await bus.drain();
  await prober.close();
  await ops.close();
  await telemetry.shutdown();
});
