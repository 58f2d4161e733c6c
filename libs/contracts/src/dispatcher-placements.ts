import { z } from "zod";
import { InvalidSubjectTokenError, NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Prefix of the core NATS subjects on which every dispatcher replica tells the others where it
 * sent which prompt prefixes (`zml.dispatcher.placements.<replica token>`), so that all
 * replicas share one view of what each node holds in its prefix cache and N replicas do not
 * scatter a tenant over N nodes. One subject per replica lets a replica drop its own echo by
 * subject. Digests only, never prompt text (docs/capacity.md, "Prefix affinity").
 */
export const DISPATCHER_PLACEMENTS_PREFIX = "zml.dispatcher.placements";
/** Wildcard for every replica's placements. */
export const DISPATCHER_PLACEMENTS_ALL = `${DISPATCHER_PLACEMENTS_PREFIX}.*`;

/** `zml.dispatcher.placements.<token>`; throws {@link InvalidSubjectTokenError} on a bad token. */
export function dispatcherPlacementsSubject(replicaToken: string): string {
  if (!NODE_ID_PATTERN.test(replicaToken)) throw new InvalidSubjectTokenError(replicaToken);
  return `${DISPATCHER_PLACEMENTS_PREFIX}.${replicaToken}`;
}

/** Placements one message carries at most. */
export const DISPATCHER_PLACEMENTS_MAX = 256;

/**
 * Placements a replica made since its last message: each names the node and the prompt's
 * prefix in the `Zml-Prefix` header's form (`<chars>:<base64url digests>`, at most 256
 * digests of 8 characters each).
 */
export const DispatcherPlacementsSchema = z.object({
  type: z.literal("dispatcher.placements.v1"),
  replica: z.string().min(1).max(128),
  placements: z
    .array(
      z.object({
        node: z.string().regex(NODE_ID_PATTERN),
        prefix: z
          .string()
          .max(16 + 256 * 8)
          .regex(/^\d{1,12}:[A-Za-z0-9_-]+$/),
      }),
    )
    .min(1)
    .max(DISPATCHER_PLACEMENTS_MAX),
});
export type DispatcherPlacements = z.infer<typeof DispatcherPlacementsSchema>;
