import { z } from "zod";
import { NODE_ID_PATTERN } from "@zml/contracts";

/*
 * Cost-table and quality-score documents. They live here until the contracts owner moves
 * them into `@zml/contracts` beside the other fleet schemas.
 */

const Id = z.string().regex(NODE_ID_PATTERN, "letters, digits, '-' and '_', at most 64");
const Family = z.string().min(1).max(64);
const UsdPerGpuHour = z.number().nonnegative().finite();
const GpusPerNode = z.number().int().positive().default(1);

/** Exactly one of `node_id` and `family` scopes an entry; a node entry beats a family one. */
function oneScope(entry: { node_id?: string | undefined; family?: string | undefined }): boolean {
  return (entry.node_id === undefined) !== (entry.family === undefined);
}
const ONE_SCOPE = { message: "set exactly one of node_id and family", path: ["node_id"] };

/**
 * Spot price of one accelerator family in one cloud account, refreshed periodically. The
 * entry names the nodes that run in that account because a node spec does not say which
 * cloud account it lives in.
 */
export const CloudSpotCostSchema = z.strictObject({
  kind: z.literal("cloud_spot"),
  cloud_account: z.string().min(1).max(128),
  family: Family,
  nodes: z.array(Id).min(1),
  usd_per_gpu_hour: UsdPerGpuHour,
  gpus_per_node: GpusPerNode,
  /** Epoch ms of the price quote. */
  updated_at: z.number().int().nonnegative(),
});
export type CloudSpotCost = z.infer<typeof CloudSpotCostSchema>;

/** Operator-defined price of an on-prem node, or of every node of a family. */
export const OnPremCostSchema = z
  .strictObject({
    kind: z.literal("on_prem"),
    node_id: Id.optional(),
    family: Family.optional(),
    usd_per_gpu_hour: UsdPerGpuHour,
    gpus_per_node: GpusPerNode,
  })
  .refine(oneScope, ONE_SCOPE);
export type OnPremCost = z.infer<typeof OnPremCostSchema>;

/** One row of the provider cost table. */
export const CostEntrySchema = z.discriminatedUnion("kind", [
  CloudSpotCostSchema,
  OnPremCostSchema,
]);
export type CostEntry = z.infer<typeof CostEntrySchema>;

/**
 * A third-party quality score (0–100, higher is better) for one model on one node or on
 * every node of a family. Scores older than the snapshot's `qualityStalenessMs` are ignored.
 */
export const QualityScoreSchema = z
  .strictObject({
    model: z.string().min(1).max(256),
    node_id: Id.optional(),
    family: Family.optional(),
    score: z.number().min(0).max(100),
    /** Who published the score, e.g. a benchmark provider. */
    source: z.string().min(1).max(128),
    /** Epoch ms of the measurement. */
    updated_at: z.number().int().nonnegative(),
  })
  .refine(oneScope, ONE_SCOPE);
export type QualityScore = z.infer<typeof QualityScoreSchema>;
