// Shared in-flight accounting across dispatcher replicas, as a model: replicas that decide
// with the real routing core and exchange their counts the way the dispatcher does (a full
// count on every change, answered by each peer; FIFO per sender like core NATS, with random
// delays). The documented bound (docs/capacity.md): at most `replicas - 1` requests over a
// node's max_concurrency, whatever the interleaving.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  buildSnapshot,
  createLiveTable,
  createPeerInFlightTable,
  decide,
  type LiveTable,
  type PeerInFlightTable,
} from "../src/index.ts";
import { MODEL, NOW, node, policy, seeded, state } from "./fixtures.ts";

interface Replica {
  live: LiveTable;
  peers: PeerInFlightTable;
  /** Seq of this replica's last message, of the one carrying its latest change, and the
   * latest seq heard from each peer. */
  seq: number;
  changeSeq: number;
  seen: Record<string, number>;
}

type Event =
  | { at: number; kind: "arrive"; replica: number }
  | { at: number; kind: "finish"; replica: number; node: string }
  | {
      at: number;
      kind: "deliver";
      to: number;
      from: number;
      counts: Record<string, number>;
      seq: number;
      seen: Record<string, number>;
      wantsReply: boolean;
    };

function simulate(
  seed: number,
  replicas: number,
  maxConcurrency: number,
  requests: number,
  spreadMs: number,
) {
  const random = seeded(seed);
  const nodes = [
    node("n1", { max_concurrency: maxConcurrency }),
    node("n2", { max_concurrency: maxConcurrency }),
  ];
  const snapshot = buildSnapshot({ nodes });
  const pol = policy({ cost_priority: "latency" });
  const group: Replica[] = Array.from({ length: replicas }, () => {
    const live = createLiveTable(snapshot);
    for (const n of nodes) live.applyState(state(n.id));
    return { live, peers: createPeerInFlightTable(60_000), seq: 0, changeSeq: 0, seen: {} };
  });
  const events: Event[] = [];
  const lastDelivery = new Map<string, number>();
  const countsOf = (r: number) => {
    const c: Record<string, number> = {};
    group[r]!.live.inFlight.forEach((v, i) => {
      if (v > 0) c[nodes[i]!.id] = v;
    });
    return c;
  };
  const broadcast = (from: number, at: number, wantsReply: boolean) => {
    const counts = countsOf(from);
    const sender = group[from]!;
    const seq = ++sender.seq;
    if (wantsReply) {
      sender.changeSeq = seq;
      sender.peers.ownChanged();
    }
    const seen = { ...sender.seen };
    for (let to = 0; to < replicas; to++) {
      if (to === from) continue;
      const key = `${from}>${to}`;
      const when = Math.max(lastDelivery.get(key) ?? 0, at + random() * 5);
      lastDelivery.set(key, when);
      events.push({ at: when, kind: "deliver", to, from, counts, seq, seen, wantsReply });
    }
  };
  // Everyone says hello first, as a starting replica does.
  for (let r = 0; r < replicas; r++) broadcast(r, 0, true);
  // The burst: many more requests than slots, arriving within a few ms.
  for (let k = 0; k < requests; k++) {
    events.push({
      at: 10 + random() * spreadMs,
      kind: "arrive",
      replica: Math.floor(random() * replicas),
    });
  }
  let worst = 0;
  let served = 0;
  while (events.length > 0) {
    events.sort((a, b) => a.at - b.at);
    const e = events.shift()!;
    const r = e.kind === "deliver" ? group[e.to]! : group[e.replica]!;
    if (e.kind === "arrive") {
      const d = decide(snapshot, r.live, { model: MODEL, tier: 1 }, pol, NOW);
      if (!d.ok) continue;
      const id = d.candidates[0]!.node.id;
      r.live.dispatched(id);
      served++;
      const total = group.reduce((s, g) => s + g.live.inFlight[snapshot.nodeIndex.get(id)!]!, 0);
      worst = Math.max(worst, total - maxConcurrency);
      broadcast(e.replica, e.at, true);
      events.push({ at: e.at + 1 + random() * 30, kind: "finish", replica: e.replica, node: id });
    } else if (e.kind === "finish") {
      r.live.completed(e.node);
      broadcast(e.replica, e.at, true);
    } else {
      r.seen[String(e.from)] = e.seq;
      r.peers.report(String(e.from), e.counts, (e.seen[String(e.to)] ?? 0) >= r.changeSeq, e.at);
      r.live.setPeerInFlight(r.peers.totals(), r.peers.peers() + 1, r.peers.fresh());
      if (e.wantsReply) broadcast(e.to, e.at, false);
    }
  }
  return { worst, served };
}

describe("shared in-flight accounting (model)", () => {
  it("never puts more than replicas - 1 requests over a node's limit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        fc.integer({ min: 2, max: 4 }),
        fc.integer({ min: 1, max: 16 }),
        fc.constantFrom(8, 50, 400),
        (seed, replicas, limit, spreadMs) => {
          const { worst, served } = simulate(seed, replicas, limit, 8 * limit, spreadMs);
          expect(worst).toBeLessThanOrEqual(replicas - 1);
          // The fleet is used, not starved by the shares: a replica may always take its share
          // of each node, `ceil(limit / replicas)`. Not more: a replica that keeps changing
          // before its peers' answers arrive keeps only that share until a quiet round trip
          // (docs/capacity.md, "What it costs"), so a burst shorter than a round trip may
          // leave slots free (seen: 7 of 8 served, 2 replicas, limit 4, 8 ms burst).
          expect(served).toBeGreaterThanOrEqual(2 * Math.ceil(limit / replicas));
        },
      ),
      { numRuns: 300 },
    );
  }, 60_000);
});
