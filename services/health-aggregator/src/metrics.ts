import { NODE_STATUSES } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { Counter, Gauge, Histogram } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";

export type ProbeOutcome = "ok" | "failed";

/**
 * The aggregator's Prometheus metrics. Per-node series exist only on the replica that owns
 * the node, so summing over replicas never counts a node twice.
 */
export interface AggregatorMetrics {
  probe(outcome: ProbeOutcome, seconds: number): void;
  node(state: NodeState): void;
  /** Removes a node's series once this replica no longer owns it. */
  forgetNode(nodeId: string): void;
  ownership(ownedNodes: number, liveReplicas: number): void;
}

export function createAggregatorMetrics(registry: Registry): AggregatorMetrics {
  const registers = [registry];
  const probes = new Counter({
    name: "zml_aggregator_probes_total",
    help: "Node probes (health plus metrics) by outcome",
    labelNames: ["outcome"],
    registers,
  });
  const duration = new Histogram({
    name: "zml_aggregator_probe_duration_seconds",
    help: "Duration of one node probe, including timeouts",
    labelNames: ["outcome"],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const status = new Gauge({
    name: "zml_node_state",
    help: "1 for the node's current status, 0 for the others",
    labelNames: ["node", "status"],
    registers,
  });
  const pending = new Gauge({
    name: "zml_node_probe_pending",
    help: "1 while the node waits for a successful probe before it may take traffic",
    labelNames: ["node"],
    registers,
  });
  const queueDepth = new Gauge({
    name: "zml_node_queue_depth",
    help: "Requests running plus waiting on the node, from its own metrics",
    labelNames: ["node"],
    registers,
  });
  const score = new Gauge({
    name: "zml_node_health_score",
    help: "Health score 0-100 from queue depth and recent dispatch error rate",
    labelNames: ["node"],
    registers,
  });
  const hitRatio = new Gauge({
    name: "zml_node_prefix_cache_hit_ratio",
    help:
      "Share of prompt tokens the node served from its prefix cache over the last poll " +
      "interval, from its own metrics (absent when it reports none)",
    labelNames: ["node"],
    registers,
  });
  const owned = new Gauge({
    name: "zml_aggregator_owned_nodes",
    help: "Nodes this replica polls",
    registers,
  });
  const replicas = new Gauge({
    name: "zml_aggregator_replicas",
    help: "Live aggregator replicas this replica knows of, itself included",
    registers,
  });

  return {
    probe(outcome, seconds) {
      probes.inc({ outcome });
      duration.observe({ outcome }, seconds);
    },
    node(state) {
      for (const s of NODE_STATUSES) {
        status.set({ node: state.node_id, status: s }, s === state.status ? 1 : 0);
      }
      pending.set({ node: state.node_id }, state.probe_pending ? 1 : 0);
      queueDepth.set({ node: state.node_id }, state.queue_depth);
      score.set({ node: state.node_id }, state.health_score);
      if (state.prefix_cache_hit_rate === null) hitRatio.remove({ node: state.node_id });
      else hitRatio.set({ node: state.node_id }, state.prefix_cache_hit_rate);
    },
    forgetNode(nodeId) {
      for (const s of NODE_STATUSES) status.remove({ node: nodeId, status: s });
      pending.remove({ node: nodeId });
      queueDepth.remove({ node: nodeId });
      score.remove({ node: nodeId });
      hitRatio.remove({ node: nodeId });
    },
    ownership(ownedNodes, liveReplicas) {
      owned.set(ownedNodes);
      replicas.set(liveReplicas);
    },
  };
}
