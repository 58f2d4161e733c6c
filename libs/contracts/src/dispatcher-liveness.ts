import { z } from "zod";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Dispatcher liveness. Every dispatcher replica publishes a beat here every
 * `interval_ms` while it runs (and one with `leaving: true` when it stops), so a requester
 * that was told by an answer frame or an `accept` which replica serves its request learns within about a
 * second that the replica is gone, instead of waiting for the request's timeout.
 * One beat per replica, not per request: the cost does not grow with traffic.
 */
export const DISPATCHER_ALIVE_SUBJECT = "zml.dispatcher.alive";

export const DispatcherAliveSchema = z.object({
  type: z.literal("dispatcher.alive.v1"),
  replica: z.string().regex(NODE_ID_PATTERN),
  /** How often this replica beats: a requester declares it lost after a few missed beats. */
  interval_ms: z.number().int().min(10).max(60_000),
  /** The replica is stopping: what it still serves is finished or abandoned now. */
  leaving: z.boolean().optional(),
});
export type DispatcherAlive = z.infer<typeof DispatcherAliveSchema>;
