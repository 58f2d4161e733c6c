// Composition root of the attestation service: reads the environment and the trust
// material, starts telemetry, connects to NATS and hands the real quote fetch to the app.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
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
import { startAttestation } from "./app.ts";
import { loadConfig } from "./config.ts";
import { fetchNodeQuote } from "./quote-fetch.ts";
import { loadTrust } from "./trust.ts";

reportStartupErrors("zml-attestation");
const telemetry = startTelemetry({ serviceName: "zml-attestation", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "attestation", level: config.LOG_LEVEL });
const shutdown = createShutdown(log, config);
const { registry } = createMetrics({ service: "attestation" });
const trust = await loadTrust(config, (path) => readFile(path, "utf8"));
if (!trust.intelRoot) {
  log.warn(
    { file: config.ATTESTATION_TRUST_ROOT_PEM_FILE },
    "trust anchor is not Intel's SGX root CA: dev and tests only",
  );
}
// Filled in as start-up gets there. The ops server comes first: while NATS or JetStream is
// away it answers not-ready and start-up keeps trying, instead of exiting into an
// orchestrator's restart loop. A signal before the start is done exits at once.
const started: { bus?: Bus; app?: Awaited<ReturnType<typeof startAttestation>> } = {};
const ops = await startOpsServer({
  host: config.ATTESTATION_OPS_HOST,
  port: config.ATTESTATION_OPS_PORT,
  registry,
  isReady: () =>
    !shutdown.stopping && started.app?.isReady() === true && started.bus?.isConnected() === true,
  log,
});
const bus = await connectBus({
  ...busOptionsOf(config, "attestation"),
  name: "zml-attestation",
  log,
});
started.bus = bus;
const app = await startWhenPossible(
  () =>
    withAttemptRegistry(registry, (attemptRegistry) =>
      startAttestation({
        bus,
        config,
        policy: trust.policy,
        fetchQuote: (node, nonce, options) =>
          fetchNodeQuote(node.endpoint, nonce, config.ATTESTATION_QUOTE_TIMEOUT_MS, options),
        log,
        registry: attemptRegistry,
        clock: Date.now,
        randomHex: (bytes) => randomBytes(bytes).toString("hex"),
      }),
    ),
  { what: "attestation", log },
);
started.app = app;
log.info({ ops: ops.url, ...app.summary() }, "attestation ready");

shutdown.onStop(async (context) => {
  await app.stop(context);
  await bus.drain();
  await ops.close();
  await telemetry.shutdown();
});
