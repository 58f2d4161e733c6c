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
  const timers = new Map<string, NodeJS.Timeout>();
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

  const schedule = (id: string, waitMs: number) => {
    timers.set(
      id,
      setTimeout(() => {
        const node = current.get(id);
        if (!node || stopped) return;
        void withSlot(() => options.poll(node)).finally(() => {
          if (timers.has(id) && !stopped) schedule(id, delay());
        });
      }, waitMs),
    );
  };

  return {
    sync(nodes) {
      current = nodes;
      for (const [id, timer] of timers) {
        if (!nodes.has(id)) {
          clearTimeout(timer);
          timers.delete(id);
        }
      }
      for (const id of nodes.keys()) {
        if (!timers.has(id)) schedule(id, 0);
      }
    },
    stop() {
      stopped = true;
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
    },
  };
}
