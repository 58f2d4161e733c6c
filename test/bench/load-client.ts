import { join } from "node:path";
import { startPlanProcess } from "./plan-process.ts";
import type { PlanProcess } from "./plan-process.ts";
import type { LoadPlan, LoadResult } from "./plan.ts";

/** The load generator process, driven one plan at a time. */
export type LoadGenerator = PlanProcess<Omit<LoadPlan, "id">, LoadResult>;

/** Spawns `load.ts` with this Node binary; with `cpuProfileDir`, under `--cpu-prof`. */
export function startLoadGenerator(
  options: { cpuProfileDir?: string } = {},
): Promise<LoadGenerator> {
  return startPlanProcess(join(import.meta.dirname, "load.ts"), {
    what: "load generator",
    nanKeys: /^(p50|p99|max)$/,
    nodeArgs: options.cpuProfileDir
      ? ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDir}`]
      : [],
  });
}
