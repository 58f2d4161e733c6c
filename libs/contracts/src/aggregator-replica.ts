import { z } from "zod";

/**
 * One health-aggregator replica's heartbeat, kept in KV under the replica's id. Replicas
 * shard the nodes between the ids they have heard from recently.
 */
export const AggregatorHeartbeatSchema = z.object({
  type: z.literal("aggregator.heartbeat.v1"),
  replica_id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  /** Epoch ms the replica started. */
  started_at: z.number().int(),
  /** Epoch ms of this heartbeat, by the replica's clock. */
  at: z.number().int(),
});
export type AggregatorHeartbeat = z.infer<typeof AggregatorHeartbeatSchema>;
