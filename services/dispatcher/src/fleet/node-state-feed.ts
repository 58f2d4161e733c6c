import type { NodeState } from "@zml/contracts";

/**
 * The dispatcher's view of node state, fed from two sources: the aggregator's
 * `zml.node.state.<node>` messages (core NATS, delivered by whichever server is up) and the
 * node-state KV bucket (its watch replays the last state on start and after a reconnect).
 * Either alone can stall: the bucket while its stream has no leader, the messages while a
 * dispatcher is new or was disconnected. Taking the newer of the two keeps routing moving
 * while a server of the cluster is lost.
 *
 * Newer means a later or equal `checked_at`: an aggregator updates a state between probes
 * (from dispatch observations) without moving `checked_at`, and the same state arriving by
 * both paths is applied twice, harmlessly. An older one (a KV replay behind a message) is
 * dropped. A delete comes only from the bucket (the node was removed from the fleet).
 */
export interface NodeStateFeed {
  readonly map: ReadonlyMap<string, NodeState>;
  /** Takes `state` unless an older one than what is held; true when taken. */
  offer(state: NodeState): boolean;
  /** The node's state is gone (deleted from the bucket); true when one was held. */
  remove(nodeId: string): boolean;
}

export function createNodeStateFeed(initial: Iterable<NodeState> = []): NodeStateFeed {
  const map = new Map<string, NodeState>();
  const offer = (state: NodeState) => {
    const held = map.get(state.node_id);
    if (held && state.checked_at < held.checked_at) return false;
    map.set(state.node_id, state);
    return true;
  };
  for (const s of initial) offer(s);
  return { map, offer, remove: (nodeId) => map.delete(nodeId) };
}
