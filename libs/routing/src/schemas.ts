/**
 * The cost-table and quality-score documents routing reads. Their schemas live in
 * `@zml/contracts` with the other configuration documents; routing re-exports them so its
 * users need one import.
 */
export {
  CloudSpotCostSchema,
  OnPremCostSchema,
  CostEntrySchema,
  QualityScoreSchema,
} from "@zml/contracts";
export type { CloudSpotCost, OnPremCost, CostEntry, QualityScore } from "@zml/contracts";
