import { watchKvIntoMap } from "@zml/bus";
import type { Bus, BusLogger, KV } from "@zml/bus";
import { AggregatorHeartbeatSchema } from "@zml/contracts";
import type { AggregatorHeartbeat } from "@zml/contracts";
import { createReplicaSet } from "./replica-set.ts";

export interface MembershipOptions {
  bus: Bus;
  /** The replicas bucket (`KV_BUCKETS.aggregators`). */
  kv: KV;
  self: string;
  /** A replica not heard of for this long is dead and its nodes move to the others. */
  ttlMs: number;
  clock: () => number;
  /** While false (bus down) nobody is declared dead: the silence may be ours. */
  isConnected: () => boolean;
  log: BusLogger;
  /** Called with the sorted live replica ids (always including `self`) whenever they change. */
  onChange: (replicas: readonly string[]) => void;
}

/** This replica's view of the live aggregator replicas. */
export interface Membership {
  replicas(): readonly string[];
  /** Stops heartbeating and deletes this replica's key, so the others take over at once. */
  leave(): Promise<void>;
}

/**
 * Joins the aggregator replica set: heartbeats `self` into the replicas bucket every third
 * of the TTL and watches the bucket for the others. Liveness is judged by when a heartbeat
 * arrived here, not by the sender's clock, so clock skew between hosts does not matter —
 * except for entries already in the bucket at start-up, which are dated by their own `at`
 * so that long-dead replicas are not counted as alive for a TTL. Entries silent for three
 * TTLs are deleted, so restarts (each with a new id) leave no garbage behind.
 *
 * A replica only judges others while it hears its own heartbeats come back through the
 * watch: if they stop (the bucket's stream has no leader, the watch is catching up, or the
 * bus is down), the silence of the others says nothing about them, and nobody is declared
 * dead. So losing the bucket never leaves two replicas each owning every node; membership is
 * frozen as it was until the bucket answers again. A replica that really died meanwhile is
 * dropped one TTL after the survivors hear themselves again.
 *
 * Resolves once the current members are known.
 */
export async function joinReplicaSet(options: MembershipOptions): Promise<Membership> {
  const { kv, self, ttlMs, clock, log } = options;
  const set = createReplicaSet(self, ttlMs);
  const startedAt = clock();
  let current: readonly string[] = [self];
  let replaying = true;
  // When this replica last heard its own heartbeat back: proof the bucket and watch work.
  let selfHeardAt = clock();

  const emit = () => {
    const next = set.live(clock());
    if (next.join() === current.join()) return;
    const gone = current.filter((id) => !next.includes(id));
    const joined = next.filter((id) => !current.includes(id));
    current = next;
    log.info({ replicas: next, joined, gone }, "aggregator replicas changed");
    options.onChange(next);
  };

  const beat = async () => {
    const heartbeat: AggregatorHeartbeat = {
      type: "aggregator.heartbeat.v1",
      replica_id: self,
      started_at: startedAt,
      at: clock(),
    };
    await kv.put(self, JSON.stringify(AggregatorHeartbeatSchema.parse(heartbeat)));
  };
  await beat();

  const watch = await watchKvIntoMap(options.bus, kv, {
    schema: AggregatorHeartbeatSchema,
    log,
    onChange: (id, value) => {
      if (value === undefined) set.forget(id);
      else set.heard(id, replaying ? Math.min(value.at, clock()) : clock());
      if (id === self && value !== undefined) selfHeardAt = clock();
      if (!replaying) emit();
    },
  });
  replaying = false;
  emit();

  const tickMs = Math.max(1, Math.floor(ttlMs / 3));
  let lastTick = clock();
  const timer = setInterval(() => {
    const now = clock();
    const stalled = now - lastTick > 2 * tickMs;
    lastTick = now;
    beat().catch((err: unknown) => {
      log.warn({ err: String(err) }, "aggregator heartbeat not written");
    });
    // Two beats not heard back: the bucket (not the others) is what went quiet.
    const blind = now - selfHeardAt > 2 * tickMs;
    if (!options.isConnected() || stalled || blind) {
      set.refreshAll(now);
      return;
    }
    emit();
    for (const id of set.silent(now, 3 * ttlMs)) {
      set.forget(id);
      kv.delete(id).catch(() => undefined);
    }
  }, tickMs);

  return {
    replicas: () => current,
    async leave() {
      clearInterval(timer);
      watch.stop();
      await kv.delete(self).catch((err: unknown) => {
        log.warn({ err: String(err) }, "aggregator heartbeat not removed");
      });
    },
  };
}
