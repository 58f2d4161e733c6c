/**
 * Which aggregator replicas are alive, from when each was last heard of. Pure bookkeeping:
 * times are passed in, nothing is read from a clock.
 */
export interface ReplicaSet {
  /** Records a heartbeat of `id` heard at `at` (epoch ms); an older time never wins. */
  heard(id: string, at: number): void;
  /**
   * Counts every known replica as heard of at `now`: used when this replica could not hear
   * anyone (bus down, event loop stalled), since its own deafness is not their death.
   */
  refreshAll(now: number): void;
  /** Drops `id` (it said goodbye, or its entry is gone). */
  forget(id: string): void;
  /** Replicas heard of within the TTL before `now`, plus `self`, sorted. */
  live(now: number): string[];
  /** Replicas silent for at least `afterMs` by `now`, excluding `self`: garbage to remove. */
  silent(now: number, afterMs: number): string[];
}

export function createReplicaSet(self: string, ttlMs: number): ReplicaSet {
  const lastHeard = new Map<string, number>();
  return {
    heard(id, at) {
      lastHeard.set(id, Math.max(at, lastHeard.get(id) ?? at));
    },
    refreshAll(now) {
      for (const [id, at] of lastHeard) lastHeard.set(id, Math.max(at, now));
    },
    forget(id) {
      lastHeard.delete(id);
    },
    live(now) {
      const ids = new Set([self]);
      for (const [id, at] of lastHeard) if (now - at < ttlMs) ids.add(id);
      return [...ids].sort();
    },
    silent(now, afterMs) {
      return [...lastHeard]
        .filter(([id, at]) => id !== self && now - at >= afterMs)
        .map(([id]) => id);
    },
  };
}
