import type { NodeObservation, NodeSpec, NodeState } from "@zml/contracts";
import { applyObservation, applyProbe, createNodeHealth, toNodeState } from "@zml/health";
import type { HealthConfig, NodeHealth, ProbeResult } from "@zml/health";

/** What changed for a node after a probe or an observation, and whether to publish it. */
export interface HealthUpdate {
  state: NodeState;
  publish: boolean;
}

/**
 * The aggregator's per-node health table. Pure bookkeeping over the health lib's state
 * machine: it decides when a state is worth publishing (a change in anything routing reads,
 * or a heartbeat) but does no I/O itself.
 */
export interface NodeRegistry {
  onProbe(node: NodeSpec, probe: ProbeResult, now: number): HealthUpdate;
  onObservation(observation: NodeObservation, now: number): HealthUpdate | undefined;
  forget(nodeId: string): void;
}

export function createNodeRegistry(config: HealthConfig, heartbeatMs: number): NodeRegistry {
  const table = new Map<
    string,
    { health: NodeHealth; config: HealthConfig; published: string; publishedAt: number }
  >();

  const update = (
    nodeId: string,
    health: NodeHealth,
    nodeConfig: HealthConfig,
    now: number,
  ): HealthUpdate => {
    const state = toNodeState(health, now);
    const entry = table.get(nodeId);
    const fingerprint = routingFingerprint(state);
    const publish =
      !entry || entry.published !== fingerprint || now - entry.publishedAt >= heartbeatMs;
    table.set(nodeId, {
      health,
      config: nodeConfig,
      published: publish ? fingerprint : entry.published,
      publishedAt: publish ? now : entry.publishedAt,
    });
    return { state, publish };
  };

  return {
    onProbe(node, probe, now) {
      const health = table.get(node.id)?.health ?? createNodeHealth(node.id, now);
      // The score weighs queue depth against this node's own capacity.
      const nodeConfig = { ...config, maxConcurrency: node.max_concurrency };
      return update(node.id, applyProbe(health, probe, nodeConfig, now), nodeConfig, now);
    },
    onObservation(observation, now) {
      const entry = table.get(observation.node_id);
      if (!entry) return undefined; // not (yet) a node this aggregator polls
      const health = applyObservation(entry.health, observation, entry.config, now);
      return update(observation.node_id, health, entry.config, now);
    },
    forget(nodeId) {
      table.delete(nodeId);
    },
  };
}

/** The fields routing decisions read; a change in any of them is published at once. */
function routingFingerprint(s: NodeState): string {
  return `${s.status}|${s.probe_pending}|${s.queue_depth}|${Math.round(s.health_score)}`;
}
