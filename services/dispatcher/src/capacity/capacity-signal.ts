/**
 * Wakes requests that queue for capacity (`queue_on_saturation`). It is notified by node
 * state changes and by completions on this dispatcher — never by polling — and each woken
 * waiter re-runs the routing decision.
 */
export interface CapacitySignal {
  notify(): void;
  /** Resolves true when notified, false when `timeoutMs` passes or `abort` fires first. */
  wait(timeoutMs: number, abort?: AbortSignal): Promise<boolean>;
  waiting(): number;
}

export function createCapacitySignal(): CapacitySignal {
  const waiters = new Set<(notified: boolean) => void>();
  return {
    notify() {
      if (waiters.size === 0) return;
      const woken = [...waiters];
      waiters.clear();
      for (const wake of woken) wake(true);
    },
    wait(timeoutMs, abort) {
      return new Promise((resolve) => {
        if (abort?.aborted || timeoutMs <= 0) {
          resolve(false);
          return;
        }
        const done = (notified: boolean) => {
          clearTimeout(timer);
          abort?.removeEventListener("abort", onAbort);
          waiters.delete(done);
          resolve(notified);
        };
        const onAbort = () => done(false);
        const timer = setTimeout(() => done(false), timeoutMs);
        abort?.addEventListener("abort", onAbort, { once: true });
        waiters.add(done);
      });
    },
    waiting: () => waiters.size,
  };
}
