// Which dispatcher replicas are alive, from their beats on `zml.dispatcher.alive` and the
// `accept` frames of the requests they took. The tracker is pure (time is passed in); the
// follower wires it to the bus and to one shared sweep timer, so a request costs no timer.
import { subscribeJson } from "@zml/bus";
import type { Bus, BusLogger, Subscription } from "@zml/bus";
import { DISPATCHER_ALIVE_SUBJECT, DispatcherAliveSchema } from "@zml/contracts";

export type LossReason = "silent" | "left";

export interface LivenessTracker {
  /** A beat from `replica`, which beats every `intervalMs`. */
  beat(replica: string, intervalMs: number, now: number): void;
  /** `replica` accepted a request or sent one of its frames: a sign of life (also the first). */
  accepted(replica: string, now: number): void;
  /** `replica` said it is leaving: lost now. */
  left(replica: string): void;
  /** Declares lost every replica silent for longer than its loss bound. */
  sweep(now: number): void;
  /** Replicas currently believed alive. */
  size(): number;
}

/**
 * A replica is lost after `max(lossAfterMs, 3 × its beat interval)` without a beat or an
 * accept, or at once when it says it is leaving; `onLost` is told once per loss (a replica
 * heard again later is tracked afresh).
 */
export function createLivenessTracker(options: {
  lossAfterMs: number;
  onLost: (replica: string, reason: LossReason) => void;
}): LivenessTracker {
  const replicas = new Map<string, { lastSeenAt: number; lossAfterMs: number }>();
  const seen = (replica: string, now: number, intervalMs?: number) => {
    const known = replicas.get(replica);
    const lossAfterMs =
      intervalMs === undefined
        ? (known?.lossAfterMs ?? options.lossAfterMs)
        : Math.max(options.lossAfterMs, 3 * intervalMs);
    if (known) {
      known.lastSeenAt = Math.max(known.lastSeenAt, now);
      known.lossAfterMs = lossAfterMs;
    } else replicas.set(replica, { lastSeenAt: now, lossAfterMs });
  };
  return {
    beat: (replica, intervalMs, now) => seen(replica, now, intervalMs),
    accepted: (replica, now) => seen(replica, now),
    left(replica) {
      replicas.delete(replica);
      options.onLost(replica, "left");
    },
    sweep(now) {
      for (const [replica, r] of replicas) {
        if (now - r.lastSeenAt <= r.lossAfterMs) continue;
        replicas.delete(replica);
        options.onLost(replica, "silent");
      }
    },
    size: () => replicas.size,
  };
}

export interface DispatcherFollower {
  /** For the reply mux: the replica an `accept` frame named. */
  accepted(replica: string): void;
  stop(): void;
}

/**
 * Follows the dispatchers' beats and sweeps every `sweepEveryMs`. A sweep that runs late
 * (this process was stalled: beats may be waiting unread in the socket) judges nobody, so a
 * busy intake never mistakes its own stall for a dead dispatcher.
 */
export function followDispatchers(
  bus: Bus,
  options: {
    lossAfterMs: number;
    sweepEveryMs: number;
    clock: () => number;
    log: BusLogger;
    onLost: (replica: string, reason: LossReason) => void;
    /** After each sweep that judged (on time, connected): for checks on the same beat. */
    onSweep?: () => void;
  },
): DispatcherFollower {
  const { clock } = options;
  const tracker = createLivenessTracker(options);
  const sub: Subscription = subscribeJson(
    bus,
    DISPATCHER_ALIVE_SUBJECT,
    DispatcherAliveSchema,
    (beat) => {
      if (beat.leaving) tracker.left(beat.replica);
      else tracker.beat(beat.replica, beat.interval_ms, clock());
    },
    { log: options.log },
  );
  let lastSweepAt = clock();
  const timer = setInterval(() => {
    const now = clock();
    const late = now - lastSweepAt > options.sweepEveryMs + options.lossAfterMs / 2;
    lastSweepAt = now;
    if (late || !bus.isConnected()) return;
    tracker.sweep(now);
    options.onSweep?.();
  }, options.sweepEveryMs);
  timer.unref();
  return {
    accepted: (replica) => tracker.accepted(replica, clock()),
    stop() {
      clearInterval(timer);
      sub.unsubscribe();
    },
  };
}
