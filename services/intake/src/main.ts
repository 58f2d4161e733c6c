// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and starts the intake app.
import { busOptionsOf, connectBus } from "@zml/bus";
import {
  createShutdown,
  readConfigFile,
  reportStartupErrors,
  startWhenPossible,
} from "@zml/runtime";
import { createLogger, createMetrics, startTelemetry } from "@zml/telemetry";
import { startIntake } from "./app.ts";
import { loadConfig } from "./config.ts";

reportStartupErrors("zml-intake");

/** A port in use (a system call failed) or a bad certificate or route does not heal. */
function cannotImproveByWaiting(err: unknown): boolean {
  const e = err as { syscall?: unknown; code?: unknown };
  return (
    typeof e.syscall === "string" || (typeof e.code === "string" && /^(ERR_OSSL|FST_)/.test(e.code))
  );
}
// Tracing is instrumented by hand, so the SDK only has to be up before the first request.
const telemetry = startTelemetry({ serviceName: "zml-intake", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "intake", level: config.LOG_LEVEL });
const shutdown = createShutdown(log, config);
const { registry } = createMetrics({ service: "intake" });
const tls =
  config.ZML_TLS_CERT_FILE && config.ZML_TLS_KEY_FILE
    ? {
        cert: readConfigFile("ZML_TLS_CERT_FILE", config.ZML_TLS_CERT_FILE, "PEM certificate"),
        key: readConfigFile("ZML_TLS_KEY_FILE", config.ZML_TLS_KEY_FILE, "PEM private key"),
      }
    : undefined;
const bus = await connectBus({ ...busOptionsOf(config, "intake"), name: "zml-intake", log });
// The admin API writes configuration as `admin`, over a connection of its own.
const adminBus =
  config.ZML_ADMIN_TOKEN === undefined
    ? undefined
    : await connectBus({
        ...busOptionsOf(
          { ...config, NATS_NKEY_SEED_FILE: config.ZML_ADMIN_NATS_NKEY_SEED_FILE },
          "admin",
        ),
        name: "zml-intake-admin",
        log,
      });

// Its configuration loads before it listens; while JetStream is away that keeps failing,
// and intake keeps trying rather than exiting into an orchestrator's restart loop.
const intake = await startWhenPossible(
  () =>
    startIntake({
      bus,
      ...(adminBus ? { adminBus } : {}),
      config,
      // Its metrics are registered after the last step that can fail and be retried.
      registry,
      log,
      tls,
      clock: Date.now,
      isStopping: () => shutdown.stopping,
    }),
  { what: "intake", log, isPermanent: cannotImproveByWaiting },
);
log.info(
  {
    url: intake.url,
    ...(intake.adminUrl ? { admin_url: intake.adminUrl } : {}),
    http2: tls ? "h2" : config.ZML_H2C ? "h2c" : "off",
    admin: config.ZML_ADMIN_TOKEN !== undefined,
  },
  "intake ready",
);

shutdown.onStop(async (context) => {
  await intake.stop(context);
  await adminBus?.drain();
  await bus.drain();
  await telemetry.shutdown();
});
