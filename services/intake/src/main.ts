// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS, wires the intake app and starts serving.
import { connectBus, createReplyMux } from "@zml/bus";
import { ZmlError } from "@zml/contracts";
import { onShutdownSignal, readConfigFile, reportStartupErrors } from "@zml/runtime";
import { createLogger, createMetrics, startTelemetry } from "@zml/telemetry";
import { createKvConfigStore } from "./admin/store.ts";
import { watchAllowlistFeed } from "./allowlist-feed.ts";
import { buildApp } from "./app.ts";
import { createAuthenticator } from "./auth.ts";
import { loadConfig } from "./config.ts";
import { createKeyStoreStatus } from "./key-store.ts";
import { createRateLimiter } from "./rate-limit.ts";
import { watchIntakeState } from "./state.ts";

// Tracing is instrumented by hand, so the SDK only has to be up before the first request.
reportStartupErrors("zml-intake");
const telemetry = startTelemetry({ serviceName: "zml-intake", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "intake", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "intake" });
const tls =
  config.ZML_TLS_CERT_FILE && config.ZML_TLS_KEY_FILE
    ? {
        cert: readConfigFile("ZML_TLS_CERT_FILE", config.ZML_TLS_CERT_FILE, "PEM certificate"),
        key: readConfigFile("ZML_TLS_KEY_FILE", config.ZML_TLS_KEY_FILE, "PEM private key"),
      }
    : undefined;
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-intake", log });

const keyStore = createKeyStoreStatus(config.ZML_KEY_STORE_MAX_STALE_MS);
const auth = createAuthenticator(keyStore);
const rateLimiter = createRateLimiter();
const state = await watchIntakeState(bus, log, { auth, keyStore, rateLimiter, clock: Date.now });
const allowlist = await watchAllowlistFeed(bus, log);

const mux = createReplyMux(bus);
// In-flight requests fail at once with a clear error instead of waiting for their timeout.
bus.onConnectionChange((connected) => {
  if (!connected)
    mux.failAll(new ZmlError("bus_unavailable", "message bus connection lost", null, 1));
});

const app = await buildApp({
  bus,
  mux,
  auth,
  rateLimiter,
  models: state.models.map,
  policies: state.policies.map,
  configStore: createKvConfigStore(bus),
  allowlist,
  registry,
  log,
  config,
  tls,
  clock: Date.now,
  isReady: () => bus.isConnected(),
});
await app.listen({ host: config.ZML_HOST, port: config.ZML_PORT });
log.info(
  {
    url: `${tls ? "https" : "http"}://${config.ZML_HOST}:${config.ZML_PORT}`,
    http2: tls ? "h2" : config.ZML_H2C ? "h2c" : "off",
    admin: config.ZML_ADMIN_TOKEN !== undefined,
  },
  "intake ready",
);

onShutdownSignal(log, async () => {
  await app.close();
  mux.close();
  state.stop();
  allowlist.stop();
  await bus.drain();
  await telemetry.shutdown();
});
