/**
 * What the other dispatcher replicas last said they have in flight on each node, and when
 * each was last heard from. Pure: the dispatcher feeds it messages and the clock; a replica
 * silent for `expiryMs` (it died, or its messages stopped) no longer counts, so its slots
 * come back after at most that long.
 */
export interface PeerInFlightTable {
  /**
   * Records a peer's complete counts (node id → in flight), replacing its previous ones;
   * `sawOurs` is whether it sent them after seeing this replica's latest count. A new peer
   * beyond `maxPeers` is ignored (false), so a flood of made-up replicas cannot grow it.
   */
  report(
    replica: string,
    counts: Readonly<Record<string, number>>,
    sawOurs: boolean,
    now: number,
  ): boolean;
  /** Every live peer's counts were sent after it saw this replica's latest count. */
  fresh(): boolean;
  /** This replica's count changed: no peer has seen it yet. */
  ownChanged(): void;
  /** Forgets peers silent since before `now - expiryMs`; true when one was dropped. */
  expire(now: number): boolean;
  /** In flight per node, summed over the live peers. */
  totals(): Map<string, number>;
  /** Live peers (this replica not included). */
  peers(): number;
  has(replica: string): boolean;
}

export function createPeerInFlightTable(expiryMs: number, maxPeers = 256): PeerInFlightTable {
  const byReplica = new Map<
    string,
    { counts: Readonly<Record<string, number>>; sawOurs: boolean; at: number }
  >();
  return {
    report(replica, counts, sawOurs, now) {
      if (byReplica.size >= maxPeers && !byReplica.has(replica)) return false;
      byReplica.set(replica, { counts, sawOurs, at: now });
      return true;
    },
    fresh() {
      for (const entry of byReplica.values()) if (!entry.sawOurs) return false;
      return true;
    },
    ownChanged() {
      for (const entry of byReplica.values()) entry.sawOurs = false;
    },
    expire(now) {
      let dropped = false;
      for (const [replica, entry] of byReplica) {
        if (entry.at < now - expiryMs) {
          byReplica.delete(replica);
          dropped = true;
        }
      }
      return dropped;
    },
    totals() {
      const sum = new Map<string, number>();
      for (const { counts } of byReplica.values()) {
        for (const node in counts) sum.set(node, (sum.get(node) ?? 0) + counts[node]!);
      }
      return sum;
    },
    peers: () => byReplica.size,
    has: (replica) => byReplica.has(replica),
  };
}
