import type { NodeObservation, NodeSpec, NodeState } from "@zml/contracts";
import {
  applyObservation,
  applyProbe,
  createNodeHealth,
  restoreNodeHealth,
  toNodeState,
  unservedModels,
} from "@zml/health";
import type { HealthConfig, NodeHealth, ProbeResult } from "@zml/health";

/** A change of status (with `probe_pending` shown as `+probe_pending`), for the log. */
export interface Transition {
  from: string;
  to: string;
  reason: string;
}

/** What changed for a node after a probe or an observation, and whether to publish it. */
export interface HealthUpdate {
  state: NodeState;
  publish: boolean;
  /**
   * Changes of status or `probe_pending`, oldest first: an isolation that ran out before this
   * event shows as its own step before the one the event caused.
   */
  transitions: Transition[];
}

/**
 * The aggregator's per-node health table. Pure bookkeeping over the health lib's state
 * machine: it decides when a state is worth publishing (a change in anything routing reads,
 * or in the probe's failure reason, or a heartbeat) but does no I/O itself.
 */
export interface NodeRegistry {
  onProbe(node: NodeSpec, probe: ProbeResult, now: number): HealthUpdate;
  /**
   * Folds dispatch outcomes into the health of the nodes they are for, in order; one update
   * per node however many outcomes it had (a dispatcher sends up to 100 ms of them at once).
   * Nodes not tracked here are skipped.
   */
  onObservations(observations: readonly NodeObservation[], now: number): HealthUpdate[];
  /**
   * Starts tracking a node from its last published state (see `restoreNodeHealth`) instead of
   * from nothing. Nothing is published until the node's next probe or observation.
   */
  restore(node: NodeSpec, state: NodeState, now: number): void;
  has(nodeId: string): boolean;
  forget(nodeId: string): void;
}

interface Entry {
  health: NodeHealth;
  config: HealthConfig;
  /** The node's registration, for what it says beside the health (its unserved models). */
  node: NodeSpec;
  published: string;
  publishedAt: number;
}

export function createNodeRegistry(config: HealthConfig, heartbeatMs: number): NodeRegistry {
  const table = new Map<string, Entry>();
  // The score weighs queue depth against this node's own capacity.
  const configFor = (node: NodeSpec): HealthConfig => ({
    ...config,
    maxConcurrency: node.max_concurrency,
  });

  const update = (
    previous: NodeHealth | undefined,
    health: NodeHealth,
    nodeConfig: HealthConfig,
    node: NodeSpec,
    now: number,
  ): HealthUpdate => {
    const state: NodeState = {
      ...toNodeState(health, now),
      unserved_models: unservedModels(node.framework, node.models, health.servedModels),
    };
    const entry = table.get(health.nodeId);
    const fingerprint = routingFingerprint(state);
    const publish =
      !entry || entry.published !== fingerprint || now - entry.publishedAt >= heartbeatMs;
    table.set(health.nodeId, {
      health,
      config: nodeConfig,
      node,
      published: publish ? fingerprint : entry.published,
      publishedAt: publish ? now : entry.publishedAt,
    });
    const transitions: Transition[] = [];
    let from = previous ? rawStatusOf(previous) : "new";
    if (previous) {
      const settled = toNodeState(previous, now);
      if (statusOf(settled) !== from) {
        transitions.push({ from, to: statusOf(settled), reason: "isolation period over" });
        from = statusOf(settled);
      }
    }
    const to = statusOf(state);
    if (to !== from) transitions.push({ from, to, reason: health.statusReason });
    return { state, publish, transitions };
  };

  return {
    onProbe(node, probe, now) {
      const previous = table.get(node.id)?.health;
      const nodeConfig = configFor(node);
      const health = applyProbe(previous ?? createNodeHealth(node.id, now), probe, nodeConfig, now);
      return update(previous, health, nodeConfig, node, now);
    },
    onObservations(observations, now) {
      // Per node: its entry as it was, and its health with the outcomes folded in so far.
      const folded = new Map<string, { entry: Entry; health: NodeHealth }>();
      for (const observation of observations) {
        const entry = table.get(observation.node_id);
        if (!entry) continue; // not (yet) a node this aggregator polls
        const health = folded.get(observation.node_id)?.health ?? entry.health;
        folded.set(observation.node_id, {
          entry,
          health: applyObservation(health, observation, entry.config, now),
        });
      }
      return [...folded.values()].map(({ entry, health }) =>
        update(entry.health, health, entry.config, entry.node, now),
      );
    },
    restore(node, state, now) {
      const nodeConfig = configFor(node);
      // An empty fingerprint: the first update after a takeover is always published.
      table.set(node.id, {
        health: restoreNodeHealth(state, nodeConfig, now),
        config: nodeConfig,
        node,
        published: "",
        publishedAt: now,
      });
    },
    has: (nodeId) => table.has(nodeId),
    forget(nodeId) {
      table.delete(nodeId);
    },
  };
}

function statusOf(s: NodeState): string {
  return s.probe_pending ? `${s.status}+probe_pending` : s.status;
}

function rawStatusOf(h: NodeHealth): string {
  return h.probePending ? `${h.status}+probe_pending` : h.status;
}

/** The fields routing decisions read; a change in any of them is published at once. */
function routingFingerprint(s: NodeState): string {
  // The probe's failure reason is in it so that operators see a new reason at once; it
  // changes only when the reason does, not with every failed poll. The prefix-cache hit rate
  // (in tenths) is, so that cache-aware routing learns of a node whose cache stopped (or
  // started) serving within a poll, not a heartbeat.
  const hitRate = s.prefix_cache_hit_rate === null ? "-" : Math.round(s.prefix_cache_hit_rate * 10);
  return `${s.status}|${s.probe_pending}|${s.queue_depth}|${Math.round(s.health_score)}|${s.instance_id}|${s.last_error}|${hitRate}|${s.unserved_models.join(",")}`;
}
