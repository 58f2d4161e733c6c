import { z } from "zod";
import { MODEL_ID_PATTERN } from "./fleet.ts";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Configuration documents beyond the fleet file: the provider cost table, quality scores,
 * approved code measurements and the revocation list. Each lives in its own KV bucket (see
 * `KV_BUCKETS`), one document per key, written by the admin API or the `zml` CLI and
 * watched into memory by the services that use it.
 */

/**
 * Keys of documents that have no natural id (cost entries, quality scores): letters,
 * digits, `-`, `_`, `=` and inner dots, at most 128 — valid as NATS KV keys and URL segments.
 */
export const CONFIG_KEY_PATTERN = /^[-=\w]{1,128}(\.[-=\w]{1,128})*$/;
export const ConfigKeySchema = z
  .string()
  .max(128)
  .regex(CONFIG_KEY_PATTERN, "letters, digits, '-', '_', '=' and inner '.', at most 128");

const Id = z.string().regex(NODE_ID_PATTERN, "letters, digits, '-' and '_', at most 64");
const ModelId = z
  .string()
  .max(256)
  .regex(MODEL_ID_PATTERN, "letters, digits, '-', '_', '=', '/' and inner '.'");
const Family = z.string().min(1).max(64);
const UsdPerGpuHour = z.number().nonnegative().finite();
const GpusPerNode = z.number().int().positive().default(1);

// Same shapes as libs/routing's cost and quality documents, so both read one format.

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
  /**
   * Epoch ms the price was last confirmed (fetched, or entered by hand): the price's age
   * counts from here.
   */
  updated_at: z.number().int().nonnegative(),
  /**
   * How long after `updated_at` routing trusts the price; past it the node's configured
   * `cloud.fallback_usd_per_gpu_hour` applies (marked stale). Default: routing's
   * `spotPriceMaxAgeMs` (15 min).
   */
  max_age_ms: z.number().int().positive().optional(),
  /** Who produced the price, e.g. `aws:DescribeSpotPriceHistory`; absent when typed by hand. */
  source: z.string().min(1).max(128).optional(),
  /** Epoch ms the provider says the price took effect (AWS spot price timestamp). */
  quoted_at: z.number().int().nonnegative().optional(),
});
export type CloudSpotCost = z.infer<typeof CloudSpotCostSchema>;

/** Prefix of the cost-table keys the cost feed owns (`spot.<cloud account>.<node>`). */
export const SPOT_COST_KEY_PREFIX = "spot";

/** The cost-table key the feed writes a node's spot price under. */
export function spotCostKey(cloudAccount: string, nodeId: string): string {
  return `${SPOT_COST_KEY_PREFIX}.${cloudAccount}.${nodeId}`;
}

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
 * every node of a family. Consumers ignore scores older than their staleness bound.
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

/** Hex of a given byte length, normalised to lower case. */
const hex = (bytes: number) =>
  z
    .string()
    .toLowerCase()
    .regex(new RegExp(`^[0-9a-f]{${bytes * 2}}$`), `${bytes} bytes of hex`);

/**
 * A TDX code measurement approved for one model at one tier (3 or 4). `mrtd` is required;
 * every other register given must match too, registers left out are not compared.
 */
export const ApprovedMeasurementSchema = z.strictObject({
  id: Id,
  model: ModelId,
  tier: z.number().int().min(3).max(4),
  mrtd: hex(48),
  rtmr0: hex(48).optional(),
  rtmr1: hex(48).optional(),
  rtmr2: hex(48).optional(),
  rtmr3: hex(48).optional(),
  mrconfigid: hex(48).optional(),
  mrowner: hex(48).optional(),
  mrownerconfig: hex(48).optional(),
  mrseam: hex(48).optional(),
  xfam: hex(8).optional(),
  td_attributes: hex(8).optional(),
  description: z.string().max(512).optional(),
});
export type ApprovedMeasurement = z.infer<typeof ApprovedMeasurementSchema>;

/** The fields a revocation can match a cached attestation on. */
export const REVOCATION_MATCH_FIELDS = [
  "node_id",
  "mrtd",
  "fmspc",
  "pck_serial",
  "advisory_id",
] as const;

/**
 * One revocation-list entry. It invalidates every cached attestation matching all of the
 * fields it sets (at least one), e.g. a code measurement, a platform (FMSPC) or an Intel
 * security advisory (a quote whose TCB carries that advisory id).
 */
export const RevocationSchema = z
  .strictObject({
    id: Id,
    reason: z.string().min(1).max(512),
    node_id: Id.optional(),
    mrtd: hex(48).optional(),
    fmspc: hex(6).optional(),
    /** PCK certificate serial number, hex. */
    pck_serial: z
      .string()
      .toLowerCase()
      .regex(/^[0-9a-f]{2,40}$/, "hex, at most 20 bytes")
      .optional(),
    advisory_id: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "e.g. INTEL-SA-00837")
      .optional(),
    /** Epoch ms the entry was made. */
    revoked_at: z.number().int().nonnegative(),
  })
  .refine((r) => REVOCATION_MATCH_FIELDS.some((f) => r[f] !== undefined), {
    message: `set at least one of ${REVOCATION_MATCH_FIELDS.join(", ")}`,
    path: ["node_id"],
  });
export type Revocation = z.infer<typeof RevocationSchema>;
