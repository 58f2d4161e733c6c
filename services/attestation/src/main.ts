// Composition root of the attestation service: mirrors the revocation list, approved
// measurements and nodes from KV, attests every tier 3/4 node in the background, publishes
// results to `zml_attestations` + `zml.attestation.result.<node>`, and answers
// `zml.attestation.verify`.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { connectBus, encodeJson, openKv, publishJson, watchKvIntoMap } from "@zml/bus";
import {
  ApprovedMeasurementSchema,
  ATTESTATION_NONCE_BYTES,
  ATTESTATION_RESULTS_BUCKET,
  AttestationResultSchema,
  attestationResultSubject,
  KV_BUCKETS,
  NodeSpecSchema,
  RevocationSchema,
} from "@zml/contracts";
import type { ApprovedMeasurement, AttestationResult, Revocation } from "@zml/contracts";
import { onShutdownSignal, reportStartupErrors } from "@zml/runtime";
import { createLogger, createMetrics, startOpsServer, startTelemetry } from "@zml/telemetry";
import { createAttestationService } from "./attestation-service.ts";
import { createAttestor } from "./attestor.ts";
import { loadConfig } from "./config.ts";
import { createAttestationMetrics } from "./metrics.ts";
import { fetchNodeQuote } from "./quote-fetch.ts";
import { loadTrust } from "./trust.ts";
import { serveVerify } from "./verify-handler.ts";

reportStartupErrors("zml-attestation");
const telemetry = startTelemetry({ serviceName: "zml-attestation", env: process.env });
const config = loadConfig(process.env);
const log = createLogger({ service: "attestation", level: config.LOG_LEVEL });
const { registry } = createMetrics({ service: "attestation" });
const metrics = createAttestationMetrics(registry);
const trust = await loadTrust(config, (path) => readFile(path, "utf8"));
if (!trust.intelRoot) {
  log.warn(
    { file: config.ATTESTATION_TRUST_ROOT_PEM_FILE },
    "trust anchor is not Intel's SGX root CA: dev and tests only",
  );
}
const bus = await connectBus({ servers: config.NATS_URL, name: "zml-attestation", log });
let ready = false;

// The service reads the KV mirrors through `live`; the watches fill it in below.
const live: {
  revocations: ReadonlyMap<string, Revocation>;
  measurements: ReadonlyMap<string, ApprovedMeasurement>;
} = { revocations: new Map(), measurements: new Map() };

const resultsKv = await openKv(bus, ATTESTATION_RESULTS_BUCKET);
const publish = (result: AttestationResult) => {
  const key = `${ATTESTATION_RESULTS_BUCKET}.${result.node_id}`;
  resultsKv
    .put(result.node_id, encodeJson(key, AttestationResultSchema, result))
    .catch((err: unknown) => {
      log.warn({ node: result.node_id, err: String(err) }, "attestation result not written");
    });
  publishJson(bus, attestationResultSubject(result.node_id), AttestationResultSchema, result);
};

const attest = createAttestor({
  fetchQuote: (node, nonce, options) =>
    fetchNodeQuote(node.endpoint, nonce, config.ATTESTATION_QUOTE_TIMEOUT_MS, options),
  approved: () => live.measurements.values(),
  revocations: () => live.revocations.values(),
  policy: trust.policy,
  now: Date.now,
});

const service = createAttestationService({
  attest: async (node, nonce, options) => {
    const end = metrics.duration.startTimer();
    const result = await attest(node, nonce, options);
    end();
    metrics.attestations.inc({ outcome: result.ok ? "ok" : (result.reason_code ?? "failed") });
    if (!result.ok) {
      log.warn(
        { node: node.id, reason_code: result.reason_code, reason: result.reason },
        "attestation failed",
      );
    }
    return result;
  },
  newNonce: () => randomBytes(ATTESTATION_NONCE_BYTES).toString("hex"),
  publish,
  unpublish: (nodeId) => {
    resultsKv.delete(nodeId).catch((err: unknown) => {
      log.warn({ node: nodeId, err: String(err) }, "attestation result not deleted");
    });
  },
  revocations: () => live.revocations.values(),
  now: Date.now,
  schedule: (fn, delayMs) => {
    const timer = setTimeout(fn, delayMs);
    timer.unref();
    return () => clearTimeout(timer);
  },
  ttlMs: config.ATTESTATION_TTL_MS,
  retryMs: config.ATTESTATION_RETRY_MS,
  log,
});

// The whole revocation list is replayed before anything is attested or served.
const revocations = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.revocations), {
  schema: RevocationSchema,
  log,
  onChange: (key, value, map) => {
    live.revocations = map;
    metrics.revocations.set(map.size);
    log.info({ revocation: key, removed: value === undefined }, "revocation list changed");
    service.revocationsChanged();
  },
});
live.revocations = revocations.map;
metrics.revocations.set(revocations.map.size);
const measurements = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.measurements), {
  schema: ApprovedMeasurementSchema,
  log,
  onChange: (_key, _value, map) => {
    live.measurements = map;
    service.measurementsChanged();
  },
});
live.measurements = measurements.map;

// Results of an earlier run stay valid until re-attested, but revocations made while this
// service was down apply before it reports ready.
const previous = await watchKvIntoMap(resultsKv, { schema: AttestationResultSchema, log });
previous.stop();
service.seed(previous.map.values());

let nodesLoaded = false;
const nodes = await watchKvIntoMap(await openKv(bus, KV_BUCKETS.nodes), {
  schema: NodeSpecSchema,
  log,
  // Until the whole table is loaded a partial one would look like removed nodes.
  onChange: (_key, _value, map) => {
    if (nodesLoaded) service.syncNodes(map);
  },
});
nodesLoaded = true;
service.syncNodes(nodes.map);

const verifySub = serveVerify(bus, service, { log, metrics });
ready = true;

const ops = await startOpsServer({
  host: config.ATTESTATION_OPS_HOST,
  port: config.ATTESTATION_OPS_PORT,
  registry,
  isReady: () => ready && bus.isConnected(),
  log,
});
log.info(
  { ops: ops.url, revocations: revocations.map.size, measurements: measurements.map.size },
  "attestation ready",
);

onShutdownSignal(log, async () => {
  ready = false;
  service.stop();
  revocations.stop();
  measurements.stop();
  nodes.stop();
  await verifySub.drain();
  await bus.drain();
  await ops.close();
  await telemetry.shutdown();
});
