// Composition root of the attestation service: reads the environment and the trust
// material, starts telemetry, connects to NATS and hands the real quote fetch to the app.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
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
import { startAttestation } from "./app.ts";
import { loadConfig } from "./config.ts";
import { fetchNodeQuote } from "./quote-fetch.ts";
import { loadTrust } from "./trust.ts";

reportStartupErrors("zml-attestation");
const telemetry = startTelemetry({ serviceName: "zml-attestation", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "attestation", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "attestation" });
const trust = await loadTrust(config, (path) => readFile(path, "utf8"));
if (!trust.intelRoot) {
  log.warn(
    { file: config.ATTESTATION_TRUST_ROOT_PEM_FILE },
    "trust anchor is not Intel's SGX root CA: dev and tests only",
  );
}
// Filled in as start-up gets there; the ops server and the shutdown handler come first.
const started: { bus?: Bus; app?: Awaited<ReturnType<typeof startAttestation>> } = {};
// While NATS or JetStream is away the ops server answers not-ready and start-up keeps
// trying, instead of exiting into an orchestrator's restart loop.
const ops = await startOpsServer({
  host: config.ATTESTATION_OPS_HOST,
  port: config.ATTESTATION_OPS_PORT,
  registry,
  isReady: () => started.app?.isReady() === true && started.bus?.isConnected() === true,
  log,
});
const starting = new AbortController();
onShutdownSignal(log, async () => {
  starting.abort(new Error("shutting down"));
  await started.app?.stop();
  await started.bus?.drain();
  await ops.close();
  await telemetry.shutdown();
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
  { what: "attestation", log, signal: starting.signal },
).catch(untilShutdown(starting.signal));
started.app = app;
log.info({ ops: ops.url, ...app.summary() }, "attestation ready");
