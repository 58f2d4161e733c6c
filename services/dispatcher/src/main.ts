// Composition root: the only place that reads the environment, starts telemetry, connects
// to NATS and wires the dispatcher together.
import { randomBytes } from "node:crypto";
import { connectBus, openKv, publishJson, subscribeJson, watchKvIntoMap } from "@zml/bus";
import type { Bus, KvMap } from "@zml/bus";
import {
  ATTESTATION_NONCE_BYTES,
  ATTESTATION_RESULTS_BUCKET,
  AccountSpecSchema,
  AttestationResultSchema,
  RevocationSchema,
  DISPATCHER_QUEUE_GROUP,
  HEADERS,
  KV_BUCKETS,
  ModelSpecSchema,
  NODE_COOLDOWN_SUBJECT,
  NodeCooldownSchema,
  NodeObservationBatchSchema,
  NodeSpecSchema,
  NodeStateSchema,
  PolicySpecSchema,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  SESSIONS_BUCKET,
  SessionSchema,
  nodeObservationSubject,
  createNodeAddressPolicy,
} from "@zml/contracts";
import { CostEntrySchema, QualityScoreSchema } from "@zml/routing";
import { onShutdownSignal, reportStartupErrors } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import type { z } from "zod";
import { createAttestationGate } from "./attestation-gate.ts";
import { startBatchWorker } from "./batch/batch-worker.ts";
import { createCancellations } from "./cancellations.ts";
import { createCapacitySignal } from "./capacity-signal.ts";
import { loadConfig } from "./config.ts";
import { createRouteHandler } from "./handle-route.ts";
import { createDispatcherMetrics } from "./metrics.ts";
import { createNodePools } from "./node-pools.ts";
import { createObservationBatcher } from "./observation-batcher.ts";
import { createRoutingState } from "./routing-state.ts";
import { loadNodeSecrets } from "./secrets.ts";
import { createSessionStore } from "./session-store.ts";
import { createSessionService, createVerifyClient, serveSessions } from "./sessions.ts";

// Tracing is instrumented by hand, so the SDK only has to be up before the first message.
reportStartupErrors("zml-dispatcher");
const telemetry = startTelemetry({ serviceName: "zml-dispatcher", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "dispatcher", level: config.LOG_LEVEL });
const secrets = loadNodeSecrets(config.ZML_NODE_SECRETS_FILE);
const { registry } = createMetrics({ service: "dispatcher" });
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-dispatcher", log });
const capacity = createCapacitySignal();

const [nodes, models, policies, costs, quality, states, accounts, attestations, revocations] =
  await Promise.all([
    watch(bus, KV_BUCKETS.nodes, NodeSpecSchema),
    watch(bus, KV_BUCKETS.models, ModelSpecSchema),
    watch(bus, KV_BUCKETS.policies, PolicySpecSchema),
    watch(bus, KV_BUCKETS.costs, CostEntrySchema),
    watch(bus, KV_BUCKETS.qualityScores, QualityScoreSchema),
    watch(bus, KV_BUCKETS.nodeState, NodeStateSchema),
    watch(bus, KV_BUCKETS.accounts, AccountSpecSchema),
    watch(bus, ATTESTATION_RESULTS_BUCKET, AttestationResultSchema),
    watch(bus, KV_BUCKETS.revocations, RevocationSchema),
  ]);
// Tier-4 sessions, loaded before serving like the rest of the configuration.
const sessionsKv = await openKv(bus, SESSIONS_BUCKET);
const sessionMap = await watchKvIntoMap(sessionsKv, { schema: SessionSchema, log });
const sessions = createSessionStore(sessionsKv, sessionMap);
const routing = createRoutingState({
  nodes: nodes.map,
  models: models.map,
  policies: policies.map,
  costs: costs.map,
  quality: quality.map,
  states: states.map,
});
// Config changes mark the routing snapshot stale (rebuilt on the next decision); a state
// change may free capacity for queued requests.
for (const config of [nodes, models, policies, costs, quality]) {
  config.onChange(() => routing.configChanged());
}
// Tier 3/4: attested-until follows results, revocations and endpoints from memory; expiry
// is checked by the routing core on every decision. A node caught with another TLS key is
// attested afresh.
const verify = createVerifyClient(bus);
const attestation = createAttestationGate(
  { nodes: nodes.map, results: attestations.map, revocations: revocations.map },
  routing,
  {
    clock: Date.now,
    reattest: (nodeId) => {
      log.warn({ node: nodeId }, "TLS key differs from the attested one; re-attesting");
      verify({ type: "attestation.verify.v1", node_id: nodeId, fresh: true }, 10_000).catch(
        (err: unknown) => log.warn({ node: nodeId, err: String(err) }, "re-attestation failed"),
      );
    },
  },
);
attestation.refresh(Date.now());
for (const source of [attestations, revocations, nodes]) {
  source.onChange(() => attestation.refresh(Date.now()));
}
states.onChange((key, state) => {
  if (routing.stateChanged(key, state)) capacity.notify();
});

const pools = createNodePools({
  connections: config.DISPATCH_POOL_CONNECTIONS,
  connectTimeoutMs: config.DISPATCH_CONNECT_TIMEOUT_MS,
  pins: attestation,
  nodeAddresses: createNodeAddressPolicy({
    allow: config.ZML_NODE_ALLOW_CIDRS,
    deny: config.ZML_NODE_DENY_CIDRS,
  }),
});
const cancellations = createCancellations();
const observations = createObservationBatcher({
  flushMs: 100,
  maxBatch: 500,
  send: (nodeId, list) =>
    publishJson(bus, nodeObservationSubject(nodeId), NodeObservationBatchSchema, {
      type: "node.observation.batch.v1",
      node_id: nodeId,
      observations: list,
    }),
});
const executeDeps = {
  bus,
  routing,
  pools,
  capacity,
  attestation,
  observations,
  sessions,
  states: states.map,
  secrets,
  config,
  log,
  metrics: createDispatcherMetrics(registry),
  clock: Date.now,
  random: Math.random,
};
const sessionSubs = serveSessions(
  bus,
  createSessionService({
    ...executeDeps,
    accounts: accounts.map,
    revocations: revocations.map,
    results: attestations.map,
    store: sessions,
    verify,
    newNonce: () => randomBytes(ATTESTATION_NONCE_BYTES).toString("hex"),
    newSessionId: () => `ses-${randomBytes(16).toString("hex")}`,
  }),
  log,
);
const sweep = setInterval(() => {
  sessions.sweep(Date.now(), config.SESSION_RETENTION_MS).catch((err: unknown) => {
    log.warn({ err: String(err) }, "session sweep failed");
  });
}, config.SESSION_SWEEP_INTERVAL_MS);
sweep.unref();
const handle = createRouteHandler({ ...executeDeps, cancellations });
const batch = config.BATCH_ENABLED
  ? await startBatchWorker({ ...executeDeps, accounts, registry })
  : undefined;
const requests = bus.nc.subscribe(ROUTE_REQUEST_SUBJECT, {
  queue: DISPATCHER_QUEUE_GROUP,
  callback: (err, msg) => {
    if (err) {
      log.error({ err: String(err) }, "route subscription error");
      return;
    }
    handle(msg).catch((e: unknown) => log.error({ err: String(e) }, "route handler failed"));
  },
});
// Every replica hears every cancel; only the one serving the request acts on it.
const cancels = bus.nc.subscribe(ROUTE_CANCEL_SUBJECT, {
  callback: (_err, msg) => {
    const inbox = msg.headers?.get(HEADERS.cancelInbox);
    if (inbox) cancellations.cancel(inbox);
  },
});
const cooldowns = subscribeJson(
  bus,
  NODE_COOLDOWN_SUBJECT,
  NodeCooldownSchema,
  (c) => void routing.current().live.coolDown(c.node_id, c.until),
  { log },
);

const ops = await startOpsServer({
  host: config.DISPATCHER_OPS_HOST,
  port: config.DISPATCHER_OPS_PORT,
  registry,
  isReady: () => bus.isConnected(),
  log,
});
log.info({ ops: ops.url, nodes: nodes.map.size }, "dispatcher ready");

onShutdownSignal(log, async () => {
  await requests.drain();
  clearInterval(sweep);
  await Promise.all(sessionSubs.map((sub) => sub.drain()));
  await batch?.stop();
  observations.flush();
  cancels.unsubscribe();
  cooldowns.unsubscribe();
  for (const w of [
    nodes,
    models,
    policies,
    costs,
    quality,
    states,
    accounts,
    attestations,
    revocations,
    sessionMap,
  ]) {
    w.stop();
  }
  await bus.drain();
  await pools.close();
  await ops.close();
  await telemetry.shutdown();
});

async function watch<S extends z.ZodType>(
  b: Bus,
  bucket: string,
  schema: S,
): Promise<KvMap<z.output<S>>> {
  return watchKvIntoMap(await openKv(b, bucket), { schema, log });
}
