import type { NodeObservation, NodeSpec, NodeState } from "@zml/contracts";
import type { ProbeResult } from "@zml/health";
import type { AggregatorMetrics } from "./metrics.ts";
import type { HealthUpdate, NodeRegistry } from "./node-registry.ts";
import { createPollScheduler } from "./poll-scheduler.ts";
import type { PollSchedulerOptions } from "./poll-scheduler.ts";
import { ownedKeys } from "./rendezvous.ts";

export interface AggregatorLogger {
  warn(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export interface AggregatorOptions {
  /** This replica's id, as heartbeated into the replicas bucket. */
  self: string;
  table: NodeRegistry;
  /** Probes one node; never throws (failures are failed results). */
  probe: (node: NodeSpec) => Promise<ProbeResult>;
  /** The node's last published state (the KV snapshot), to start from on a takeover. */
  snapshot: (nodeId: string) => NodeState | undefined;
  /** Broadcasts the state and writes the KV snapshot. */
  publish: (state: NodeState) => void;
  /** Deletes the KV snapshot of a node that left the fleet. */
  retract: (nodeId: string) => void;
  metrics: AggregatorMetrics;
  log: AggregatorLogger;
  clock: () => number;
  schedule: Omit<PollSchedulerOptions, "poll">;
}

/**
 * One aggregator replica: polls the registered nodes that rendezvous-hash to it among the
 * live replicas, folds probes and dispatcher observations into their health, and publishes
 * their state. Observations for nodes it does not own are left to their owner.
 */
export interface Aggregator {
  /** The registered nodes changed (the fleet was applied). */
  setNodes(nodes: ReadonlyMap<string, NodeSpec>): void;
  /** The live replica set changed; `self` is always counted as live. */
  setReplicas(replicas: readonly string[]): void;
  /** Dispatch outcomes, one message's worth: those for nodes this replica polls are applied. */
  observe(observations: readonly NodeObservation[]): void;
  /** Ids of the nodes this replica polls. */
  owned(): ReadonlySet<string>;
  stop(): void;
}

export function createAggregator(options: AggregatorOptions): Aggregator {
  const { self, table, metrics, log, clock } = options;
  let nodes: ReadonlyMap<string, NodeSpec> = new Map();
  let replicas: readonly string[] = [self];
  let owned = new Set<string>();
  // Probes still running at stop end without publishing: the bus is about to close.
  let stopped = false;

  const apply = (update: HealthUpdate) => {
    if (stopped) return;
    const { state } = update;
    for (const t of update.transitions) {
      log.info(
        { node: state.node_id, from: t.from, to: t.to, reason: t.reason },
        "node state changed",
      );
    }
    metrics.node(state);
    if (update.publish) options.publish(state);
  };

  // The last probe failure told per node: each different one is logged once, at the default
  // level, so an operator sees why a node is not Active without a log line every poll.
  const lastProbeError = new Map<string, string>();
  const reportProbe = (node: NodeSpec, error: string | null) => {
    const previous = lastProbeError.get(node.id);
    if (error === null) {
      if (previous === undefined) return;
      lastProbeError.delete(node.id);
      log.info({ node: node.id, previous_error: previous }, "probe succeeded again");
      return;
    }
    if (previous === error) return;
    lastProbeError.set(node.id, error);
    log.warn(
      { node: node.id, framework: node.framework, endpoint: node.endpoint, error },
      "probe failed",
    );
  };

  // A llama.cpp node runs as many requests at once as it has slots; a max_concurrency above
  // that queues in llama.cpp, one below leaves slots idle. Said once per node and slot count.
  const slotsNoted = new Map<string, string>();
  const reportSlots = (node: NodeSpec, slots: number | null) => {
    if (slots === null) return;
    const note = `${slots}/${node.max_concurrency}`;
    if (slotsNoted.get(node.id) === note) return;
    slotsNoted.set(node.id, note);
    if (slots === node.max_concurrency) return;
    log.warn(
      { node: node.id, slots, max_concurrency: node.max_concurrency },
      slots < node.max_concurrency
        ? "node has fewer slots than its max_concurrency: requests beyond them wait in its own queue"
        : "node has more slots than its max_concurrency: some stay idle",
    );
  };

  const poll = async (node: NodeSpec) => {
    const startedAt = clock();
    const result = await options.probe(node);
    metrics.probe(result.ok ? "ok" : "failed", (clock() - startedAt) / 1000);
    // Ownership may have moved while the probe ran; the new owner's view wins.
    if (!owned.has(node.id)) return;
    reportProbe(node, result.ok ? null : result.error);
    if (result.ok) reportSlots(node, result.reading.slots);
    apply(table.onProbe(nodes.get(node.id) ?? node, result, clock()));
  };

  const scheduler = createPollScheduler({ ...options.schedule, poll });

  const reshard = () => {
    const next = ownedKeys(
      self,
      nodes.keys(),
      replicas.includes(self) ? replicas : [...replicas, self],
    );
    const gained: string[] = [];
    const lost: string[] = [];
    for (const id of owned) {
      if (next.has(id)) continue;
      if (nodes.has(id)) lost.push(id);
      table.forget(id);
      metrics.forgetNode(id);
      lastProbeError.delete(id);
      slotsNoted.delete(id);
    }
    for (const id of next) {
      if (owned.has(id)) continue;
      gained.push(id);
      const snapshot = options.snapshot(id);
      const spec = nodes.get(id);
      if (snapshot && spec && !table.has(id)) table.restore(spec, snapshot, clock());
    }
    owned = next;
    scheduler.sync(new Map([...nodes].filter(([id]) => next.has(id))));
    metrics.ownership(owned.size, replicas.length);
    if (gained.length > 0 || lost.length > 0) {
      log.info(
        {
          owned: owned.size,
          nodes: nodes.size,
          replicas: replicas.length,
          gained: gained.length,
          lost: lost.length,
          // Enough ids to follow a node in the logs without flooding them on a big fleet.
          gained_ids: gained.slice(0, 50),
          lost_ids: lost.slice(0, 50),
        },
        "node ownership changed",
      );
    }
  };

  return {
    setNodes(next) {
      for (const id of nodes.keys()) {
        if (next.has(id)) continue;
        // Every replica retracts a removed node, so it goes even if its owner just died.
        table.forget(id);
        metrics.forgetNode(id);
        options.retract(id);
      }
      nodes = new Map(next);
      reshard();
    },
    setReplicas(next) {
      replicas = [...next];
      reshard();
    },
    observe(observations) {
      const mine = observations.filter((o) => owned.has(o.node_id));
      if (mine.length === 0) return;
      for (const update of table.onObservations(mine, clock())) apply(update);
    },
    owned: () => owned,
    stop() {
      stopped = true;
      scheduler.stop();
    },
  };
}
