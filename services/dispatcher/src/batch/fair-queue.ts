/**
 * Jobs waiting for capacity, in arrival order. Each account contributes at most one waiting
 * job at a time (its consumer pulls the next one only after this one started), so arrival
 * order is round-robin between accounts: one account's flood cannot starve another's.
 * A scan starts every ticket that can start, in order, so a job whose nodes are busy does
 * not hold back a job that could run elsewhere.
 */
export interface FairQueue<T> {
  add(item: T): void;
  remove(item: T): void;
  /** Items in order; `start` returns true for items that left the queue. */
  scan(start: (item: T) => boolean): void;
  size(): number;
}

export function createFairQueue<T>(): FairQueue<T> {
  let items: T[] = [];
  return {
    add(item) {
      items.push(item);
    },
    remove(item) {
      items = items.filter((i) => i !== item);
    },
    scan(start) {
      items = items.filter((item) => !start(item));
    },
    size: () => items.length,
  };
}
