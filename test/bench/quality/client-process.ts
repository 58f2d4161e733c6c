import { join } from "node:path";
import { startPlanProcess } from "../plan-process.ts";
import type { PlanProcess } from "../plan-process.ts";
import type { QualityPlan, QualityResult } from "./plan.ts";

/** The routing-quality client process (`client.ts`), driven one plan at a time. */
export type QualityClient = PlanProcess<Omit<QualityPlan, "id">, QualityResult>;

export function startQualityClient(): Promise<QualityClient> {
  return startPlanProcess(join(import.meta.dirname, "client.ts"), {
    what: "quality client",
    nanKeys: /^p\d+$/,
  });
}
