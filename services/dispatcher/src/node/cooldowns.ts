// Node cooldowns, shared between dispatcher replicas: a node that failed an attempt (5xx,
// network error, first-byte timeout, refused answer) rests for `NODE_COOLDOWN_MS` (30 s by
// default), or for the node's own Retry-After when longer, on every replica at once. The rest
// itself is a time in the live routing table (`live.coolDown`); this module only spreads it.
import { hostname } from "node:os";
import { publishJson, subscribeJson } from "@zml/bus";
import type { Bus, Subscription } from "@zml/bus";
import { NODE_COOLDOWN_MAX_MS, NODE_COOLDOWN_SUBJECT, NodeCooldownSchema } from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import type { RoutingState } from "../fleet/routing-state.ts";

/**
 * How long a failed node rests: the configured cooldown, or the node's Retry-After when
 * longer, up to the cap every receiver enforces anyway.
 */
export function cooldownMs(configuredMs: number, retryAfterS: number | null): number {
  return Math.min(NODE_COOLDOWN_MAX_MS, Math.max(configuredMs, (retryAfterS ?? 0) * 1000));
}

/** Rests `nodeId` here and tells the other replicas. */
export function shareCooldown(
  deps: { bus: Bus; routing: RoutingState; clock: () => number },
  nodeId: string,
  durationMs: number,
  reason: string,
): void {
  deps.routing.current().live.coolDown(nodeId, deps.clock() + durationMs);
  publishJson(deps.bus, NODE_COOLDOWN_SUBJECT, NodeCooldownSchema, {
    type: "node.cooldown.v2",
    node_id: nodeId,
    duration_ms: durationMs,
    reason: reason.slice(0, 64),
    origin: `dispatcher@${hostname()}:${process.pid}`,
  });
}

/** Applies the other replicas' cooldowns (and this one's echo, which changes nothing). */
export function followCooldowns(deps: {
  bus: Bus;
  routing: RoutingState;
  clock: () => number;
  log: Logger;
}): Subscription {
  return subscribeJson(
    deps.bus,
    NODE_COOLDOWN_SUBJECT,
    NodeCooldownSchema,
    // The schema caps duration_ms: a forged cooldown sidelines a node for minutes, not forever.
    (c) => void deps.routing.current().live.coolDown(c.node_id, deps.clock() + c.duration_ms),
    { log: deps.log },
  );
}
