// Shared prefix placements: every replica tells the others, over core NATS, which prompt
// prefixes (digests only) it sent to which node, and folds what they say into its prefix
// index, so that one replica's placement counts for all and N replicas do not scatter a
// tenant over N nodes. Decisions only read the index. Why this shape, what it costs in bytes
// and how stale it may be: docs/capacity.md, "Prefix affinity".
import { decodeJson, publishJson, subscribeMessages } from "@zml/bus";
import type { Bus } from "@zml/bus";
import {
  DISPATCHER_PLACEMENTS_ALL,
  DISPATCHER_PLACEMENTS_MAX,
  DispatcherPlacementsSchema,
  dispatcherPlacementsSubject,
} from "@zml/contracts";
import type { DispatcherPlacements } from "@zml/contracts";
import { decodePromptPrefix, encodePromptPrefix } from "@zml/routing";
import type { PromptPrefix } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { RoutingState } from "../fleet/routing-state.ts";

export interface PlacementShareOptions {
  bus: Bus;
  routing: RoutingState;
  log: Logger;
  clock: () => number;
  /** Unique per process, e.g. `dispatcher@host:pid/token`. */
  replica: string;
  /** Unique per process, a subject token (letters, digits, `-`, `_`). */
  replicaToken: string;
  /** Placements made within this window travel as one message. */
  coalesceMs?: number;
  /** Bytes per second this replica may send; placements beyond it are dropped and counted. */
  bytesPerSecond?: number;
  /** Placements dropped by the byte budget, and bytes sent and received. */
  counted?: (event: "dropped" | "sent_bytes" | "received_bytes", amount: number) => void;
}

export interface PlacementShare {
  /** A prompt with this prefix was sent to the node (this replica's own dispatch). */
  placed(nodeId: string, prefix: PromptPrefix): void;
  stop(): void;
}

/** The coalescing window: the staleness a peer's placement adds on top of the bus's latency. */
export const PLACEMENT_COALESCE_MS = 10;
/** The default byte budget: 256 KiB/s, about 500 placements of an 8 KB prompt a second. */
export const PLACEMENT_BYTES_PER_SECOND = 256 * 1024;

export function startPlacementShare(options: PlacementShareOptions): PlacementShare {
  const { bus, routing, log, clock, replica } = options;
  const ownSubject = dispatcherPlacementsSubject(options.replicaToken);
  const coalesceMs = options.coalesceMs ?? PLACEMENT_COALESCE_MS;
  const budget = options.bytesPerSecond ?? PLACEMENT_BYTES_PER_SECOND;
  const count = options.counted ?? (() => {});
  let pending: DispatcherPlacements["placements"] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  // A token bucket of bytes, holding at most one second's budget.
  let tokens = budget;
  let refilledAt = clock();

  const take = (bytes: number): boolean => {
    const now = clock();
    tokens = Math.min(budget, tokens + ((now - refilledAt) * budget) / 1000);
    refilledAt = now;
    if (tokens < bytes) return false;
    tokens -= bytes;
    return true;
  };
  const send = () => {
    timer = undefined;
    const placements = pending;
    pending = [];
    if (placements.length === 0) return;
    publishJson(bus, ownSubject, DispatcherPlacementsSchema, {
      type: "dispatcher.placements.v1",
      replica,
      placements,
    });
  };

  const sub = subscribeMessages(
    bus,
    DISPATCHER_PLACEMENTS_ALL,
    (msg) => {
      // Our own echo is dropped by subject, before any decoding.
      if (msg.subject === ownSubject) return;
      count("received_bytes", msg.data.length);
      let message: DispatcherPlacements;
      try {
        message = decodeJson(msg.subject, DispatcherPlacementsSchema, msg.data);
      } catch (err) {
        log.warn({ err: String(err), subject: msg.subject }, "dropped invalid message");
        return;
      }
      const { live } = routing.current();
      for (const { node, prefix } of message.placements) {
        const decoded = decodePromptPrefix(prefix);
        if (decoded !== undefined) live.recordPrefix(node, decoded);
      }
    },
    { log },
  );

  return {
    placed(nodeId, prefix) {
      const encoded = encodePromptPrefix(prefix);
      // What the placement adds to the JSON message, near enough for a budget.
      const bytes = encoded.length + nodeId.length + 24;
      if (!take(bytes)) {
        count("dropped", 1);
        return;
      }
      count("sent_bytes", bytes);
      pending.push({ node: nodeId, prefix: encoded });
      if (pending.length >= DISPATCHER_PLACEMENTS_MAX) {
        if (timer) clearTimeout(timer);
        send();
      } else if (timer === undefined) {
        timer = setTimeout(send, coalesceMs);
        timer.unref();
      }
    },
    stop() {
      if (timer) clearTimeout(timer);
      timer = undefined;
      pending = [];
      sub.unsubscribe();
    },
  };
}
