import { z } from "zod";
import { InvalidSubjectTokenError, NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Prefix of the core NATS subjects on which every dispatcher replica tells the others how
 * many requests it has in flight on each node (`zml.dispatcher.inflight.<replica token>`),
 * so that all replicas share one view of capacity. One subject per replica lets a replica
 * drop its own echo by subject, without decoding it.
 */
export const DISPATCHER_IN_FLIGHT_PREFIX = "zml.dispatcher.inflight";
/** Wildcard for every replica's in-flight counts. */
export const DISPATCHER_IN_FLIGHT_ALL = `${DISPATCHER_IN_FLIGHT_PREFIX}.*`;

/** `zml.dispatcher.inflight.<token>`; throws {@link InvalidSubjectTokenError} on a bad token. */
export function dispatcherInFlightSubject(replicaToken: string): string {
  if (!NODE_ID_PATTERN.test(replicaToken)) throw new InvalidSubjectTokenError(replicaToken);
  return `${DISPATCHER_IN_FLIGHT_PREFIX}.${replicaToken}`;
}

/** More nodes than any fleet has; bounds what one forged message can make a replica store. */
export const DISPATCHER_IN_FLIGHT_MAX_NODES = 10_000;
/** More dispatcher replicas than any deployment runs. */
export const DISPATCHER_MAX_REPLICAS = 256;

const ReplicaIdSchema = z.string().min(1).max(128);

/**
 * One replica's complete in-flight counts (nodes at zero left out). A full count rather than
 * a delta, so a lost message or a replica that starts late heals with the next one.
 */
export const DispatcherInFlightSchema = z.object({
  type: z.literal("dispatcher.in_flight.v1"),
  /** The sending replica, unique per process. */
  replica: ReplicaIdSchema,
  /** Increases with every message the replica sends. */
  seq: z.number().int().nonnegative(),
  /**
   * The latest `seq` it has received from each peer: a peer whose change is covered here
   * knows these counts were sent after its change was seen.
   */
  seen: z
    .record(ReplicaIdSchema, z.number().int().nonnegative())
    .refine((r) => Object.keys(r).length <= DISPATCHER_MAX_REPLICAS, {
      message: `at most ${DISPATCHER_MAX_REPLICAS} replicas`,
    }),
  nodes: z
    .record(z.string().regex(NODE_ID_PATTERN), z.number().int().nonnegative().max(1_000_000))
    .refine((r) => Object.keys(r).length <= DISPATCHER_IN_FLIGHT_MAX_NODES, {
      message: `at most ${DISPATCHER_IN_FLIGHT_MAX_NODES} nodes`,
    }),
  /**
   * The counts changed (or the replica just started): every peer answers with its own
   * counts, so the sender learns within one round trip what the others did meanwhile.
   * Answers and heartbeats carry `false` and are not answered.
   */
  wants_reply: z.boolean(),
});
export type DispatcherInFlight = z.infer<typeof DispatcherInFlightSchema>;
