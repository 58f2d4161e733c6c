import type { ModelSpec, NodeSpec, NodeState, PolicySpec } from "@zml/contracts";
import { buildSnapshot, createLiveTable } from "@zml/routing";
import type { CostEntry, LiveTable, QualityScore, RoutingSnapshot } from "@zml/routing";

/** The configuration maps watched from KV. */
export interface ConfigSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  models: ReadonlyMap<string, ModelSpec>;
  policies: ReadonlyMap<string, PolicySpec>;
  costs: ReadonlyMap<string, CostEntry>;
  quality: ReadonlyMap<string, QualityScore>;
  states: ReadonlyMap<string, NodeState>;
}

/**
 * The routing core's snapshot (rebuilt only when configuration changes) and the live table
 * of node state, in-flight counts, cooldowns and attestations that decisions read. All
 * memory: nothing here touches the network.
 */
export interface RoutingState {
  /** Current snapshot and live table, rebuilding the snapshot first if config changed. */
  current(): { snapshot: RoutingSnapshot; live: LiveTable };
  configChanged(): void;
  /** Applies a node state; true when it may have freed capacity. */
  stateChanged(nodeId: string, state: NodeState | undefined): boolean;
}

export function createRoutingState(sources: ConfigSources): RoutingState {
  let snapshot = build(sources);
  const live = createLiveTable(snapshot);
  let dirty = false;
  for (const s of sources.states.values()) live.applyState(s);

  const current = () => {
    if (dirty) {
      snapshot = build(sources);
      live.rebind(snapshot);
      // A state that arrived for a node the old snapshot did not know was dropped.
      for (const s of sources.states.values()) live.applyState(s);
      dirty = false;
    }
    return { snapshot, live };
  };
  return {
    current,
    configChanged() {
      dirty = true;
    },
    stateChanged(nodeId, state) {
      const { live: table } = current();
      return state ? table.applyState(state) : table.clearState(nodeId);
    },
  };
}

function build(sources: ConfigSources): RoutingSnapshot {
  return buildSnapshot({
    nodes: [...sources.nodes.values()],
    models: [...sources.models.values()],
    policies: [...sources.policies.values()],
    costs: [...sources.costs.values()],
    quality: [...sources.quality.values()],
  });
}
