// Shared in-flight accounting: every replica tells the others, over core NATS,
// how many requests it has in flight on each node, and folds what they say into its live
// table. Decisions only read that table, so they stay free of network calls. Why this
// mechanism and what overshoot it allows: docs/capacity.md.
import { decodeJson, publishJson, subscribeMessages } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  DISPATCHER_IN_FLIGHT_ALL,
  DISPATCHER_MAX_REPLICAS,
  DispatcherInFlightSchema,
  dispatcherInFlightSubject,
} from "@zml/contracts";
import { createPeerInFlightTable } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { RoutingState } from "../fleet/routing-state.ts";
import type { CapacitySignal } from "./capacity-signal.ts";

export interface InFlightShareOptions {
  bus: Bus;
  routing: RoutingState;
  capacity: CapacitySignal;
  log: Logger;
  clock: () => number;
  /** Unique per process, e.g. `dispatcher@host:pid`. */
  replica: string;
  /** Unique per process, a subject token (letters, digits, `-`, `_`). */
  replicaToken: string;
  /** Least time between two messages of this replica: changes inside it are coalesced. */
  coalesceMs?: number;
  /** A full count is sent at least this often, so peers know the replica is alive. */
  heartbeatMs?: number;
  /** A peer silent this long no longer counts. */
  expiryMs?: number;
}

export interface InFlightShare {
  /** This replica's in-flight count changed (a dispatch or a completion). */
  changed(): void;
  stop(): void;
}

export function startInFlightShare(options: InFlightShareOptions): InFlightShare {
  const { bus, routing, capacity, log, clock, replica } = options;
  const ownSubject = dispatcherInFlightSubject(options.replicaToken);
  const coalesceMs = options.coalesceMs ?? 5;
  const heartbeatMs = options.heartbeatMs ?? 1_000;
  const peers = createPeerInFlightTable(options.expiryMs ?? 3_000, DISPATCHER_MAX_REPLICAS);
  let lastSentAt = Number.NEGATIVE_INFINITY;
  /** Seq of the last message sent, and of the one that carries (or will) the latest change. */
  let seq = 0;
  let changeSeq = 0;
  /** Latest seq received from each peer, echoed so it can tell its change was seen. */
  const seen: Record<string, number> = {};
  let timer: ReturnType<typeof setTimeout> | undefined;
  /** A change waits to be sent (peers will answer it); else only an answer is due. */
  let changePending = false;
  let sendPending = false;

  const ownCounts = (): Record<string, number> => {
    const { snapshot, live } = routing.current();
    const counts: Record<string, number> = {};
    const inFlight = live.inFlight;
    for (let i = 0; i < inFlight.length; i++) {
      if (inFlight[i]! > 0) counts[snapshot.nodes[i]!.spec.id] = inFlight[i]!;
    }
    return counts;
  };
  const send = () => {
    timer = undefined;
    lastSentAt = clock();
    const wantsReply = changePending;
    changePending = false;
    sendPending = false;
    seq++;
    publishJson(bus, ownSubject, DispatcherInFlightSchema, {
      type: "dispatcher.in_flight.v1",
      replica,
      seq,
      seen,
      nodes: ownCounts(),
      wants_reply: wantsReply,
    });
  };
  // Leading and trailing edge: the first change goes out at once, later ones within
  // `coalesceMs` go out together when it ends.
  const schedule = (change: boolean) => {
    if (change) {
      changePending = true;
      // No peer has seen this change until it answers the message that carries it.
      changeSeq = seq + 1;
      peers.ownChanged();
    }
    sendPending = true;
    if (timer !== undefined) return;
    const wait = lastSentAt + coalesceMs - clock();
    if (wait <= 0) send();
    else timer = setTimeout(send, wait);
  };
  const refresh = () => {
    const live = routing.current().live;
    live.setPeerInFlight(peers.totals(), peers.peers() + 1, peers.fresh(), clock());
    // Peers' completions (or a peer gone) may have freed capacity for queued requests.
    capacity.notify();
  };

  const sub = subscribeMessages(
    bus,
    DISPATCHER_IN_FLIGHT_ALL,
    (raw) => {
      // Our own echo is dropped by subject, before any decoding.
      if (raw.subject === ownSubject) return;
      let msg;
      try {
        msg = decodeJson(raw.subject, DispatcherInFlightSchema, raw.data);
      } catch (err) {
        log.warn({ err: String(err), subject: raw.subject }, "dropped invalid message");
        return;
      }
      if (msg.replica === replica) return;
      const sawOurs = (msg.seen[replica] ?? 0) >= changeSeq;
      if (!peers.report(msg.replica, msg.nodes, sawOurs, clock())) return;
      seen[msg.replica] = msg.seq;
      refresh();
      if (msg.wants_reply) schedule(false);
    },
    { log },
  );
  const heartbeat = setInterval(() => {
    if (peers.expire(clock())) {
      for (const r of Object.keys(seen)) if (!peers.has(r)) delete seen[r];
      refresh();
    }
    if (!sendPending) schedule(false);
  }, heartbeatMs);
  heartbeat.unref();
  // A replica that just started knows no peer: asking at once shortens the time it
  // decides alone to one round trip.
  schedule(true);

  return {
    // Alone, nobody needs the counts: a replica that starts asks for them.
    changed: () => {
      if (peers.peers() > 0) schedule(true);
    },
    stop() {
      clearInterval(heartbeat);
      if (timer !== undefined) clearTimeout(timer);
      sub.unsubscribe();
    },
  };
}
