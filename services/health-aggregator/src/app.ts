// One health-aggregator replica, built from injected parts: joins the replica set, polls
// the registered nodes it owns, runs each through the health state machine and publishes
// `node.state` plus the KV snapshot. `main.ts` hands it the bus and the real probe.
import {
  openKv,
  openOwnedKv,
  publishJson,
  subscribeJson,
  watchBucket,
  watchKvIntoMap,
} from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  KV_BUCKETS,
  NODE_OBSERVATION_ALL,
  NodeObservationBatchSchema,
  NodeObservationSchema,
  NodeSpecSchema,
  NodeStateSchema,
  nodeStateSubject,
} from "@zml/contracts";
import type { CloudProvider, NodeSpec } from "@zml/contracts";
import type { PriceSource } from "@zml/cost-feed";
import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import type { Logger, Registry } from "@zml/telemetry";
import { z } from "zod";
import { createAggregator } from "./aggregator.ts";
import type { AggregatorConfig } from "./config.ts";
import { startCostFeedHome } from "./cost-feed.ts";
import type { CostFeedHome } from "./cost-feed.ts";
import { createCostFeedMetrics } from "./cost-feed-metrics.ts";
import { joinReplicaSet } from "./membership.ts";
import { createAggregatorMetrics } from "./metrics.ts";
import { createNodeRegistry } from "./node-registry.ts";

export interface HealthAggregatorDeps {
  bus: Bus;
  config: AggregatorConfig;
  /** This replica's id in the replica set. */
  self: string;
  /** Probes one node's health and metrics endpoints; never throws. */
  probe: (node: NodeSpec) => Promise<ProbeResult>;
  log: Logger;
  registry: Registry;
  clock: () => number;
  random: () => number;
  /** The cloud price clients of the spot-price feed; without them the feed does not run. */
  priceSources?: Readonly<Record<CloudProvider, PriceSource>> | undefined;
}

export interface HealthAggregator {
  /** For the ready log line: nodes known, nodes owned, live replicas. */
  summary(): {
    nodes: number;
    owned: number;
    replicas: readonly string[];
    costFeeds: string[];
  };
  /** Leaves the replica set first, handing this replica's nodes to the others at once. */
  stop(): Promise<void>;
}

export async function startHealthAggregator(deps: HealthAggregatorDeps): Promise<HealthAggregator> {
  const { bus, config, log } = deps;
  const stateKv = await openOwnedKv(bus, KV_BUCKETS.nodeState);
  // The last published state of every node, read when this replica takes a node over.
  const snapshots = await watchKvIntoMap(bus, stateKv, { schema: NodeStateSchema, log });
  const healthConfig = {
    ...DEFAULT_HEALTH_CONFIG,
    isolationBaseMs: config.ISOLATION_BASE_MS,
    isolationMaxMs: config.ISOLATION_MAX_MS,
    errorWindowMs: config.ERROR_WINDOW_MS,
  };
  const aggregator = createAggregator({
    self: deps.self,
    table: createNodeRegistry(healthConfig, config.HEARTBEAT_MS),
    probe: deps.probe,
    snapshot: (nodeId) => snapshots.map.get(nodeId),
    publish: (state) => {
      stateKv
        .put(state.node_id, JSON.stringify(NodeStateSchema.parse(state)))
        .catch((err: unknown) => {
          log.warn({ node: state.node_id, err: String(err) }, "node state snapshot not written");
        });
      publishJson(bus, nodeStateSubject(state.node_id), NodeStateSchema, state);
    },
    retract: (nodeId) => {
      stateKv.delete(nodeId).catch(() => undefined);
    },
    metrics: createAggregatorMetrics(deps.registry),
    log,
    clock: deps.clock,
    schedule: {
      intervalMs: config.POLL_INTERVAL_MS,
      jitter: config.POLL_JITTER,
      concurrency: config.PROBE_CONCURRENCY,
      random: deps.random,
    },
  });

  const costFeed: CostFeedHome | undefined =
    deps.priceSources === undefined
      ? undefined
      : await startCostFeedHome(deps.self, {
          bus,
          costs: await openKv(bus, KV_BUCKETS.costs),
          sources: deps.priceSources,
          metrics: createCostFeedMetrics(deps.registry),
          log,
          clock: deps.clock,
          random: deps.random,
          jitter: config.COST_FEED_JITTER,
        });

  // Members first: a replica that loaded the nodes before it knew its peers would poll them all.
  const membership = await joinReplicaSet({
    bus,
    kv: await openOwnedKv(bus, KV_BUCKETS.aggregators),
    self: deps.self,
    ttlMs: config.REPLICA_TTL_MS,
    clock: deps.clock,
    isConnected: () => bus.isConnected(),
    log,
    onChange: (replicas) => {
      aggregator.setReplicas(replicas);
      costFeed?.setReplicas(replicas);
    },
  });
  aggregator.setReplicas(membership.replicas());
  costFeed?.setReplicas(membership.replicas());

  let nodesLoaded = false;
  const nodes = await watchBucket(bus, KV_BUCKETS.nodes, {
    schema: NodeSpecSchema,
    log,
    onChange: (_key, _value, map) => {
      if (nodesLoaded) {
        aggregator.setNodes(map);
        costFeed?.setNodes(map);
      }
    },
  });
  nodesLoaded = true;
  aggregator.setNodes(nodes.map);
  costFeed?.setNodes(nodes.map);

  // Dispatchers send observations one by one (v1) or gathered per node (batch v1).
  const observations = subscribeJson(
    bus,
    NODE_OBSERVATION_ALL,
    z.union([NodeObservationSchema, NodeObservationBatchSchema]),
    (msg) => {
      aggregator.observe(msg.type === "node.observation.v1" ? [msg] : msg.observations);
    },
    { log },
  );

  return {
    summary: () => ({
      nodes: nodes.map.size,
      owned: aggregator.owned().size,
      replicas: membership.replicas(),
      costFeeds: costFeed?.running() ?? [],
    }),
    async stop() {
      costFeed?.stop();
      await membership.leave();
      aggregator.stop();
      nodes.stop();
      snapshots.stop();
      await observations.drain();
    },
  };
}
