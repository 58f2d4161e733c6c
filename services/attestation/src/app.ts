// The attestation service, built from injected parts: mirrors the revocation list, approved
// measurements and nodes from KV, attests every tier 3/4 node in the background, publishes
// results to `zml_attestations` + `zml.attestation.result.<node>`, and answers
// `zml.attestation.verify`. `main.ts` hands it the bus, the trust policy and the real fetch.
import { encodeJson, openOwnedKv, publishJson, watchBucket, watchKvIntoMap } from "@zml/bus";
import type { Bus } from "@zml/bus";
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
import { createWorkCounter, waitUntil } from "@zml/runtime";
import type { StopContext } from "@zml/runtime";
import type { Logger, Registry } from "@zml/telemetry";
import { createAttestationService } from "./attestation-service.ts";
import { createAttestor } from "./attestor.ts";
import type { AttestorDeps } from "./attestor.ts";
import type { AttestationConfig } from "./config.ts";
import type { TrustPolicy } from "./evaluate.ts";
import { createAttestationMetrics } from "./metrics.ts";
import { serveVerify } from "./verify-handler.ts";

export interface AttestationAppDeps {
  bus: Bus;
  config: AttestationConfig;
  policy: TrustPolicy;
  /** Fetches a node's quote for a nonce (HTTP in production). */
  fetchQuote: AttestorDeps["fetchQuote"];
  log: Logger;
  registry: Registry;
  clock: () => number;
  /** `bytes` random bytes as hex (nonces). */
  randomHex: (bytes: number) => string;
}

export interface AttestationApp {
  /** True once the revocation list is replayed and verify requests are served. */
  isReady(): boolean;
  summary(): { revocations: number; measurements: number };
  /** Stops serving; running verifications may finish until `context.deadline`. */
  stop(context?: StopContext): Promise<void>;
}

export async function startAttestation(deps: AttestationAppDeps): Promise<AttestationApp> {
  const { bus, config, log } = deps;
  const metrics = createAttestationMetrics(deps.registry);
  let ready = false;
  // The service reads the KV mirrors through `live`; the watches fill it in below.
  const live: {
    revocations: ReadonlyMap<string, Revocation>;
    measurements: ReadonlyMap<string, ApprovedMeasurement>;
  } = { revocations: new Map(), measurements: new Map() };

  const resultsKv = await openOwnedKv(bus, ATTESTATION_RESULTS_BUCKET);
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
    fetchQuote: deps.fetchQuote,
    approved: () => live.measurements.values(),
    revocations: () => live.revocations.values(),
    policy: deps.policy,
    now: deps.clock,
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
    newNonce: () => deps.randomHex(ATTESTATION_NONCE_BYTES),
    publish,
    unpublish: (nodeId) => {
      resultsKv.delete(nodeId).catch((err: unknown) => {
        log.warn({ node: nodeId, err: String(err) }, "attestation result not deleted");
      });
    },
    revocations: () => live.revocations.values(),
    now: deps.clock,
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
  const revocations = await watchBucket(bus, KV_BUCKETS.revocations, {
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
  const measurements = await watchBucket(bus, KV_BUCKETS.measurements, {
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
  const previous = await watchKvIntoMap(bus, resultsKv, { schema: AttestationResultSchema, log });
  previous.stop();
  service.seed(previous.map.values());

  let nodesLoaded = false;
  const nodes = await watchBucket(bus, KV_BUCKETS.nodes, {
    schema: NodeSpecSchema,
    log,
    // Until the whole table is loaded a partial one would look like removed nodes.
    onChange: (_key, _value, map) => {
      if (nodesLoaded) service.syncNodes(map);
    },
  });
  nodesLoaded = true;
  service.syncNodes(nodes.map);

  const verifying = createWorkCounter();
  const verifySub = serveVerify(bus, service, { log, metrics, inFlight: verifying });
  ready = true;

  // Ready means the server already routes our subscriptions to us.
  await bus.flush();
  return {
    isReady: () => ready,
    summary: () => ({ revocations: revocations.map.size, measurements: measurements.map.size }),
    async stop(context) {
      ready = false;
      // No new verifications; the ones running finish (within the bound) before the
      // service's timers and watches stop under them.
      await verifySub.drain();
      const deadline = context?.deadline ?? deps.clock();
      if (!(await waitUntil(() => verifying.count() === 0, deadline, deps.clock))) {
        log.warn({ in_flight: verifying.count() }, "verifications still running at stop");
      }
      service.stop();
      revocations.stop();
      measurements.stop();
      nodes.stop();
    },
  };
}
