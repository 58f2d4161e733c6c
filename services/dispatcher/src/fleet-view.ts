import type { NodeSpec, NodeState, PolicySpec } from "@zml/contracts";

/**
 * Everything the routing decision reads, held in memory: configuration and node state are
 * mirrored from KV, in-flight counts and cooldowns are this dispatcher's own. No method here
 * touches the network.
 */
export interface FleetView {
  nodes(): Iterable<NodeSpec>;
  state(nodeId: string): NodeState | undefined;
  policy(name: string): PolicySpec | undefined;
  inFlight(nodeId: string): number;
  cooldownUntil(nodeId: string): number;
}

export interface FleetSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  states: ReadonlyMap<string, NodeState>;
  policies: ReadonlyMap<string, PolicySpec>;
}

export interface MutableFleetView extends FleetView {
  acquire(nodeId: string): void;
  release(nodeId: string): void;
  coolDown(nodeId: string, until: number): void;
}

export function createFleetView(sources: FleetSources): MutableFleetView {
  const inFlight = new Map<string, number>();
  const cooldowns = new Map<string, number>();
  return {
    nodes: () => sources.nodes.values(),
    state: (id) => sources.states.get(id),
    policy: (name) => sources.policies.get(name),
    inFlight: (id) => inFlight.get(id) ?? 0,
    cooldownUntil: (id) => cooldowns.get(id) ?? 0,
    acquire(id) {
      inFlight.set(id, (inFlight.get(id) ?? 0) + 1);
    },
    release(id) {
      const n = (inFlight.get(id) ?? 0) - 1;
      if (n > 0) inFlight.set(id, n);
      else inFlight.delete(id);
    },
    coolDown(id, until) {
      // A later, shorter failure never shortens an existing cooldown.
      if (until > (cooldowns.get(id) ?? 0)) cooldowns.set(id, until);
    },
  };
}
