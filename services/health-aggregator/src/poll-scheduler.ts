import type { NodeSpec } from "@zml/contracts";

export interface PollSchedulerOptions {
  intervalMs: number;
  /** Fraction of the interval by which each wait is randomly moved. */
  jitter: number;
  /** Probes in progress at once; a hanging node holds at most one slot until its timeout. */
  concurrency: number;
  poll: (node: NodeSpec) => Promise<void>;
  random: () => number;
}

/**
 * Polls every registered node on its own timer, so one slow node never delays another.
 * `sync` is called whenever the registry changes: new nodes start polling at once, removed
 * ones stop, and an edited node is polled with its new spec from the next round.
 */
export interface PollScheduler {
  sync(nodes: ReadonlyMap<string, NodeSpec>): void;
  stop(): void;
}

export function createPollScheduler(options: PollSchedulerOptions): PollScheduler {
  // One loop per node. A node removed and added again gets a new loop object; the old loop,
  // if a poll of it is still running, sees it is no longer current and ends there.
  const loops = new Map<string, { timer: NodeJS.Timeout | undefined }>();
  let current: ReadonlyMap<string, NodeSpec> = new Map();
  let active = 0;
  const waiting: Array<() => void> = [];
  let stopped = false;

  const withSlot = async (fn: () => Promise<void>) => {
    if (active >= options.concurrency) await new Promise<void>((r) => waiting.push(r));
    active++;
    try {
      await fn();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
  const delay = () => options.intervalMs * (1 + options.jitter * (2 * options.random() - 1));

  const schedule = (id: string, loop: { timer: NodeJS.Timeout | undefined }, waitMs: number) => {
    loop.timer = setTimeout(() => {
      loop.timer = undefined;
      const isCurrent = () => loops.get(id) === loop && !stopped;
      if (!isCurrent()) return;
      void withSlot(async () => {
        // Waiting for a slot can take a while: the node may have gone or changed meanwhile.
        const node = current.get(id);
        if (node && isCurrent()) await options.poll(node).catch(() => undefined);
      }).finally(() => {
        if (isCurrent()) schedule(id, loop, delay());
      });
    }, waitMs);
  };

  return {
    sync(nodes) {
      current = nodes;
      for (const [id, loop] of loops) {
        if (!nodes.has(id)) {
          clearTimeout(loop.timer);
          loops.delete(id);
        }
      }
      for (const id of nodes.keys()) {
        if (loops.has(id)) continue;
        const loop = { timer: undefined };
        loops.set(id, loop);
        schedule(id, loop, 0);
      }
    },
    stop() {
      stopped = true;
      for (const loop of loops.values()) clearTimeout(loop.timer);
      loops.clear();
    },
  };
}
