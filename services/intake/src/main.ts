// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS, wires the intake app and starts serving.
import { connectBus, createReplyMux, openKv, watchKvIntoMap } from "@zml/bus";
import {
  AccountSpecSchema,
  KV_BUCKETS,
  ModelSpecSchema,
  PolicySpecSchema,
  ZmlError,
} from "@zml/contracts";
import { onShutdownSignal } from "@zml/runtime";
import { createLogger, createMetrics, startTelemetry } from "@zml/telemetry";
import { buildApp } from "./app.ts";
import { createAuthenticator } from "./auth.ts";
import { loadConfig } from "./config.ts";

// Tracing is instrumented by hand, so the SDK only has to be up before the first request.
const telemetry = startTelemetry({ serviceName: "zml-intake", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "intake", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "intake" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-intake", log });

const auth = createAuthenticator();
const accounts = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.accounts), {
  schema: AccountSpecSchema,
  log,
  onChange: (_key, _value, map) => auth.reindex(map.values()),
});
auth.reindex(accounts.map.values());
const [models, policies] = await Promise.all([
  openKv(bus, KV_BUCKETS.models).then((kv) => watchKvIntoMap(kv, { schema: ModelSpecSchema, log })),
  openKv(bus, KV_BUCKETS.policies).then((kv) =>
    watchKvIntoMap(kv, { schema: PolicySpecSchema, log }),
  ),
]);

const mux = createReplyMux(bus.nc);
// In-flight requests fail at once with a clear error instead of waiting for their timeout.
bus.onConnectionChange((connected) => {
  if (!connected) mux.failAll(new ZmlError("bus_unavailable", "message bus connection lost", null, 1));
});

const app = await buildApp({
  bus,
  mux,
  auth,
  models: models.map,
  policies: policies.map,
  registry,
  log,
  config,
  clock: Date.now,
  isReady: () => bus.isConnected(),
});
await app.listen({ host: config.ZML_HOST, port: config.ZML_PORT });
log.info({ url: `http://${config.ZML_HOST}:${config.ZML_PORT}` }, "intake ready");

onShutdownSignal(log, async () => {
  await app.close();
  mux.close();
  for (const w of [accounts, models, policies]) w.stop();
  await bus.drain();
  await telemetry.shutdown();
});
