/** A place in the gate: running, or waiting for a slot. */
export interface Lease {
  /** Frees the slot, or leaves the queue. Safe to call more than once. */
  release(): void;
}

/** At most `limit` holders at a time; the others wait in FIFO order. */
export interface ConcurrencyGate {
  readonly running: number;
  readonly waiting: number;
  /** Raising it admits waiters at once; lowering it lets running holders finish. */
  setLimit(limit: number): void;
  /** `onRun` is called (synchronously when a slot is free) once the lease holds a slot. */
  enter(onRun: () => void): Lease;
  /** Drops every waiter without running it. */
  clear(): void;
}

interface Waiter {
  onRun: () => void;
  state: "waiting" | "running" | "done";
}

export function createConcurrencyGate(initialLimit: number): ConcurrencyGate {
  let limit = initialLimit;
  let running = 0;
  // FIFO as an array with a moving head. A waiter whose client went away is only marked
  // done and skipped when its turn comes, so leaving the queue costs O(1).
  let queue: (Waiter | undefined)[] = [];
  let head = 0;
  let waiting = 0;
  let abandoned = 0;

  // A holder that finishes synchronously inside onRun releases from within admit(); the
  // flag turns that nested call into a no-op so the outer loop admits the next waiter
  // instead of recursing once per queued request.
  let admitting = false;
  function admit(): void {
    if (admitting) return;
    admitting = true;
    try {
      while (running < limit && head < queue.length) {
        const next = queue[head];
        queue[head] = undefined; // let a finished waiter be collected
        head += 1;
        if (next === undefined) continue;
        if (next.state !== "waiting") {
          abandoned -= 1;
          continue;
        }
        next.state = "running";
        waiting -= 1;
        running += 1;
        next.onRun();
      }
    } finally {
      admitting = false;
      if (head === queue.length) {
        queue = [];
        head = 0;
        abandoned = 0;
      } else if (head > 1024 && head * 2 > queue.length) {
        queue = queue.slice(head);
        head = 0;
      }
    }
  }

  // Under a long saturation many clients give up while queued; drop their entries once they
  // are the majority so the queue does not keep their closures alive.
  function dropAbandoned(): void {
    if (admitting || abandoned <= 1024 || abandoned * 2 <= queue.length - head) return;
    queue = queue.slice(head).filter((w) => w !== undefined && w.state === "waiting");
    head = 0;
    abandoned = 0;
  }

  return {
    get running() {
      return running;
    },
    get waiting() {
      return waiting;
    },
    setLimit(next) {
      limit = next;
      admit();
    },
    enter(onRun) {
      const waiter: Waiter = { onRun, state: "waiting" };
      queue.push(waiter);
      waiting += 1;
      admit();
      return {
        release() {
          if (waiter.state === "waiting") {
            waiting -= 1;
            abandoned += 1;
            waiter.state = "done";
            dropAbandoned();
          } else if (waiter.state === "running") {
            running -= 1;
            admit();
          }
          waiter.state = "done";
        },
      };
    },
    clear() {
      for (let i = head; i < queue.length; i++) {
        const waiter = queue[i];
        if (waiter !== undefined && waiter.state === "waiting") waiter.state = "done";
      }
      queue = [];
      head = 0;
      waiting = 0;
      abandoned = 0;
    },
  };
}
