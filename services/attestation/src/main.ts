// Composition root of the attestation service. So far it starts, connects and reports
// ready; quote verification, the attestation cache and revocations are the trust-tier
// issue's work and plug in here.
import { connectBus } from "@zml/bus";
import { onShutdownSignal } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { loadConfig } from "./config.ts";

const telemetry = startTelemetry({ serviceName: "zml-attestation", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "attestation", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "attestation" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-attestation", log });

const ops = await startOpsServer({
  host: config.ATTESTATION_OPS_HOST,
  port: config.ATTESTATION_OPS_PORT,
  registry,
  isReady: () => bus.isConnected(),
  log,
});
log.info({ ops: ops.url }, "attestation ready");

onShutdownSignal(log, async () => {
  await bus.drain();
  await ops.close();
  await telemetry.shutdown();
});
