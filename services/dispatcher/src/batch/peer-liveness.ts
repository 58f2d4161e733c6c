// Which dispatcher replicas still hold batch jobs, from their liveness beats on
// `zml.dispatcher.alive` (the beats intake follows too). The tracker is pure (time is passed
// in); `followPeers` wires it to the bus.
import { subscribeJson } from "@zml/bus";
import type { Bus, BusLogger } from "@zml/bus";
import { DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema } from "@zml/contracts";

export interface PeerTracker {
  /** A beat from `replica`, which beats every `intervalMs`. */
  beat(replica: string, intervalMs: number, now: number): void;
  /** `replica` said it is leaving: it holds nothing from now on. */
  left(replica: string): void;
  /**
   * Whether `replica` may still hold jobs: itself; one heard within the loss bound
   * (`max(lossAfterMs, 3 × its beat interval)`); or one not heard of yet while this replica
   * is younger than the loss bound (its beats may still be on their way).
   */
  alive(replica: string, now: number): boolean;
}

export function createPeerTracker(options: {
  self: string;
  lossAfterMs: number;
  startedAt: number;
}): PeerTracker {
  const heard = new Map<string, { at: number; lossAfterMs: number }>();
  const gone = new Set<string>();
  return {
    beat(replica, intervalMs, now) {
      if (gone.has(replica)) return;
      const lossAfterMs = Math.max(options.lossAfterMs, 3 * intervalMs);
      const known = heard.get(replica);
      heard.set(replica, { at: Math.max(known?.at ?? now, now), lossAfterMs });
    },
    left(replica) {
      heard.delete(replica);
      gone.add(replica);
    },
    alive(replica, now) {
      if (replica === options.self) return true;
      if (gone.has(replica)) return false;
      const known = heard.get(replica);
      if (known) return now - known.at <= known.lossAfterMs;
      return now - options.startedAt <= options.lossAfterMs;
    },
  };
}

export interface PeerLiveness {
  alive(replica: string): boolean;
  stop(): void;
}

/** Follows every dispatcher's beats (this replica's own included, harmlessly). */
export function followPeers(
  bus: Bus,
  options: { self: string; lossAfterMs: number; clock: () => number; log: BusLogger },
): PeerLiveness {
  const tracker = createPeerTracker({ ...options, startedAt: options.clock() });
  const sub = subscribeJson(
    bus,
    DISPATCHER_ALIVE_SUBJECT,
    DispatcherAliveSchema,
    (beat) => {
      if (beat.leaving) tracker.left(beat.replica);
      else tracker.beat(beat.replica, beat.interval_ms, options.clock());
    },
    { log: options.log },
  );
  return {
    alive: (replica) => tracker.alive(replica, options.clock()),
    stop: () => sub.unsubscribe(),
  };
}
