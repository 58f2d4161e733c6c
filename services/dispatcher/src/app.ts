// The dispatcher, built from injected parts: config in memory, the routing state, the route
// and cancel subscriptions, tier-4 sessions and the batch workers. `main.ts` hands it a
// connected bus and the real clock; tests hand it the same against a test nats-server.
import {
  createAcceptAnnouncer,
  publishJson,
  subscribeJson,
  subscribeMessages,
  watchKvIntoMap,
  openOwnedKv,
} from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  nodeAddressPolicyOf,
  ATTESTATION_NONCE_BYTES,
  DISPATCHER_QUEUE_GROUP,
  HEADERS,
  NodeObservationBatchSchema,
  NODE_STATE_ALL,
  NodeStateSchema,
  ROUTE_CANCEL_SUBJECT,
  ROUTE_REQUEST_SUBJECT,
  SESSIONS_BUCKET,
  SessionSchema,
  nodeObservationSubject,
} from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { waitUntil } from "@zml/runtime";
import type { HostResolver, StopContext } from "@zml/runtime";
import type { Logger, Registry } from "@zml/telemetry";
import { startBatchWorker } from "./batch/batch-worker.ts";
import { createCapacitySignal } from "./capacity/capacity-signal.ts";
import { startInFlightShare } from "./capacity/in-flight-share.ts";
import { startPlacementShare } from "./capacity/placement-share.ts";
import { startLivenessBeats } from "./capacity/liveness-beats.ts";
import { createObservationBatcher } from "./capacity/observation-batcher.ts";
import type { DispatcherConfig } from "./config.ts";
import { watchDispatcherState } from "./fleet/dispatcher-state.ts";
import { createNodeStateFeed } from "./fleet/node-state-feed.ts";
import { createRoutingState } from "./fleet/routing-state.ts";
import { createDispatcherMetrics } from "./metrics.ts";
import { createAttestationGate } from "./node/attestation-gate.ts";
import { followCooldowns } from "./node/cooldowns.ts";
import { createNodePools } from "./node/node-pools.ts";
import { createCancellations } from "./route/cancellations.ts";
import { createRouteHandler } from "./route/handle-route.ts";
import { createSessionKeyDropper } from "./session/session-key-drop.ts";
import { createSessionStore } from "./session/session-store.ts";
import { createSessionService, createVerifyClient, serveSessions } from "./session/sessions.ts";

export interface DispatcherDeps {
  bus: Bus;
  config: DispatcherConfig;
  log: Logger;
  registry: Registry;
  /** Node credentials by `auth.secret_ref`. */
  secrets: ReadonlyMap<string, string>;
  clock: () => number;
  /** Uniform in [0, 1), for tie-breaking between near-equal nodes. */
  random: () => number;
  /** `bytes` random bytes as hex (nonces, session ids). */
  randomHex: (bytes: number) => string;
  /** This replica's id, on each answer's first frame, in `accept` frames and liveness beats. */
  replica: string;
  /**
   * Resolves node host names before the address policy judges them; the system resolver
   * when omitted (tests fix the answers, e.g. a name that resolves to loopback).
   */
  resolveHost?: HostResolver;
}

export interface Dispatcher {
  /** Nodes known when it started, for the ready log line. */
  readonly nodeCount: number;
  /**
   * Stops taking work (route and session subscriptions drained, batch pulls stopped, waiting
   * jobs handed back), lets running work finish until `deadline` (running batch jobs still
   * going then are handed back; sync requests still going then are ended by `leaving`
   * beat at intake), then releases its node connections. The bus stays open for the caller
   * to drain.
   */
  stop(context: StopContext): Promise<void>;
}

/** Loads every configuration bucket, then serves route requests, sessions and batch jobs. */
export async function startDispatcher(deps: DispatcherDeps): Promise<Dispatcher> {
  const { bus, config, log, clock } = deps;
  const buckets = await watchDispatcherState(bus, log);
  // Tier-4 sessions, loaded before serving like the rest of the configuration.
  const sessionsKv = await openOwnedKv(bus, SESSIONS_BUCKET);
  const sessionMap = await watchKvIntoMap(bus, sessionsKv, { schema: SessionSchema, log });
  const sessions = createSessionStore(sessionsKv, sessionMap);
  const capacity = createCapacitySignal();
  const nodeStates = createNodeStateFeed(buckets.nodeStates.map.values());
  const routing = createRoutingState(
    {
      nodes: buckets.nodes.map,
      models: buckets.models.map,
      policies: buckets.policies.map,
      costs: buckets.costs.map,
      quality: buckets.quality.map,
      states: nodeStates.map,
    },
    {
      clock,
      // Aged spot prices, nodes without a usable price, dangling cost entries: said once each.
      onWarnings: (warnings) => {
        for (const warning of warnings) log.warn({ warning }, "routing configuration");
      },
    },
  );
  // Config changes mark the routing snapshot stale (rebuilt on the next decision); a state
  // change may free capacity for queued requests.
  for (const source of [
    buckets.nodes,
    buckets.models,
    buckets.policies,
    buckets.costs,
    buckets.quality,
  ]) {
    source.onChange(() => routing.configChanged());
  }
  // Tier 3/4: attested-until follows results, revocations and endpoints from memory; expiry
  // is checked by the routing core on every decision. A node caught with another TLS key is
  // attested afresh.
  const verify = createVerifyClient(bus);
  const attestation = createAttestationGate(
    {
      nodes: buckets.nodes.map,
      results: buckets.attestations.map,
      revocations: buckets.revocations.map,
    },
    routing,
    {
      clock,
      reattest: (nodeId) => {
        log.warn({ node: nodeId }, "TLS key differs from the attested one; re-attesting");
        verify({ type: "attestation.verify.v1", node_id: nodeId, fresh: true }, 10_000).catch(
          (err: unknown) => log.warn({ node: nodeId, err: String(err) }, "re-attestation failed"),
        );
      },
    },
  );
  attestation.refresh(clock());
  for (const source of [buckets.attestations, buckets.revocations, buckets.nodes]) {
    source.onChange(() => attestation.refresh(clock()));
  }
  const stateArrived = (nodeId: string, value: NodeState | undefined) => {
    const taken = value ? nodeStates.offer(value) : nodeStates.remove(nodeId);
    if (taken && routing.stateChanged(nodeId, value)) capacity.notify();
  };
  buckets.nodeStates.onChange(stateArrived);

  const pools = createNodePools({
    connections: config.DISPATCH_POOL_CONNECTIONS,
    connectTimeoutMs: config.DISPATCH_CONNECT_TIMEOUT_MS,
    pins: attestation,
    nodeAddresses: nodeAddressPolicyOf(config),
    ...(deps.resolveHost ? { resolveHost: deps.resolveHost } : {}),
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
  const replicaToken = deps.randomHex(8);
  const inFlightShare = startInFlightShare({
    bus,
    routing,
    capacity,
    log,
    clock,
    replicaToken,
    replica: `${deps.replica}/${replicaToken}`,
  });
  const metrics = createDispatcherMetrics(deps.registry);
  const placements = startPlacementShare({
    bus,
    routing,
    log,
    clock,
    replicaToken,
    replica: `${deps.replica}/${replicaToken}`,
    counted: (event, amount) => metrics.prefixPlacements.inc({ event }, amount),
  });
  const executeDeps = {
    bus,
    routing,
    pools,
    capacity,
    inFlightShare,
    placements,
    attestation,
    observations,
    sessions,
    states: nodeStates.map,
    secrets: deps.secrets,
    config,
    log,
    metrics,
    clock,
    random: deps.random,
  };
  // The last step that may fail (JetStream away) before any subscription exists, so a
  // failed start leaves nothing serving behind it when it is tried again.
  const batch = config.BATCH_ENABLED
    ? await startBatchWorker({
        ...executeDeps,
        accounts: buckets.accounts,
        registry: deps.registry,
        replica: deps.replica,
      })
    : undefined;
  // The aggregator's broadcast: keeps state current while the bucket's stream is unreachable.
  const stateMessages = subscribeJson(
    bus,
    NODE_STATE_ALL,
    NodeStateSchema,
    (s) => stateArrived(s.node_id, s),
    { log },
  );
  const sessionSubs = serveSessions(
    bus,
    createSessionService({
      ...executeDeps,
      accounts: buckets.accounts.map,
      revocations: buckets.revocations.map,
      results: buckets.attestations.map,
      store: sessions,
      verify,
      newNonce: () => deps.randomHex(ATTESTATION_NONCE_BYTES),
      newSessionId: () => `ses-${deps.randomHex(16)}`,
      dropSessionKey: createSessionKeyDropper(pools, routing),
    }),
    log,
  );
  const sweep = setInterval(() => {
    sessions.sweep(clock(), config.SESSION_RETENTION_MS).catch((err: unknown) => {
      log.warn({ err: String(err) }, "session sweep failed");
    });
  }, config.SESSION_SWEEP_INTERVAL_MS);
  sweep.unref();
  // Beats first: a request accepted below is followed by intake from its first frame on.
  const beats = startLivenessBeats(bus, {
    replica: deps.replica,
    intervalMs: config.DISPATCHER_BEAT_INTERVAL_MS,
    log,
  });
  const accepts = createAcceptAnnouncer(bus, {
    replica: deps.replica,
    afterMs: config.DISPATCHER_ACCEPT_AFTER_MS,
    clock,
  });
  const requests = subscribeMessages(
    bus,
    ROUTE_REQUEST_SUBJECT,
    createRouteHandler({ ...executeDeps, cancellations, replica: deps.replica, accepts }),
    { queue: DISPATCHER_QUEUE_GROUP, log },
  );
  // Every replica hears every cancel; only the one serving the request acts on it.
  const cancels = subscribeMessages(
    bus,
    ROUTE_CANCEL_SUBJECT,
    (msg) => {
      const inbox = msg.headers?.get(HEADERS.cancelInbox);
      if (inbox) cancellations.cancel(inbox);
    },
    { log },
  );
  const cooldowns = followCooldowns({ bus, routing, clock, log });

  // Ready means the server already routes our subscriptions to us.
  await bus.flush();
  return {
    nodeCount: buckets.nodes.map.size,
    async stop({ deadline }) {
      // No new work: the server stops handing this replica route and session requests (the
      // queue group's other members get them), what was already delivered is still served.
      await requests.drain();
      clearInterval(sweep);
      await Promise.all(sessionSubs.map((sub) => sub.drain()));
      await batch?.stop(deadline);
      const finished = await waitUntil(() => cancellations.size() === 0, deadline, clock);
      if (!finished) {
        log.warn({ in_flight: cancellations.size() }, "requests still running at stop");
      }
      // Whatever still runs is over for intake now (it re-routes or answers dispatcher_lost).
      beats.leave();
      accepts.stop();
      observations.flush();
      cancels.unsubscribe();
      cooldowns.unsubscribe();
      inFlightShare.stop();
      placements.stop();
      stateMessages.unsubscribe();
      buckets.stop();
      routing.stop();
      sessionMap.stop();
      await pools.close();
    },
  };
}
