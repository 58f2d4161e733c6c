import type { NodeObservation } from "@zml/contracts";

/**
 * Gathers dispatch observations per node and hands each node's list over at most every
 * `flushMs` (or at `maxBatch`), so a busy dispatcher sends one message per node per window
 * instead of one per request, and the aggregator wakes as rarely.
 */
export interface ObservationBatcher {
  add(observation: NodeObservation): void;
  flush(): void;
}

export function createObservationBatcher(options: {
  flushMs: number;
  maxBatch: number;
  send: (nodeId: string, observations: NodeObservation[]) => void;
}): ObservationBatcher {
  const pending = new Map<string, NodeObservation[]>();
  let timer: NodeJS.Timeout | undefined;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    for (const [nodeId, list] of pending) options.send(nodeId, list);
    pending.clear();
  };
  return {
    add(observation) {
      const list = pending.get(observation.node_id);
      if (list) list.push(observation);
      else pending.set(observation.node_id, [observation]);
      if ((list?.length ?? 1) >= options.maxBatch) flush();
      else timer ??= setTimeout(flush, options.flushMs);
    },
    flush,
  };
}
