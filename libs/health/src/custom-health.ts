import { z } from "zod";
import { MetricsReadError } from "./errors.ts";
import type { MetricsReading } from "./metrics-reading.ts";

/** Self-reported status values of the custom health format. */
export const CUSTOM_HEALTH_STATUSES = ["ok", "degraded", "down"] as const;
export type CustomHealthStatus = (typeof CUSTOM_HEALTH_STATUSES)[number];

const Count = z.number().int().nonnegative();
const OptionalTotal = z.number().nonnegative().nullable().optional();

/**
 * The JSON health document a custom serving framework returns from its health path, so the
 * aggregator can treat it like vLLM or TGI:
 *
 * ```json
 * { "status": "ok", "queue_depth": 7, "running": 4, "waiting": 3, "kv_cache_usage": 0.42,
 *   "free_memory_gib": 11.5, "generation_tokens_total": 123456, "instance_id": "pod-7f9c" }
 * ```
 *
 * - `status` (required): `ok` serves normally; `degraded` and `down` both mean "do not send
 *   traffic" (the aggregator counts them as failed probes).
 * - `queue_depth` (required): requests running plus waiting.
 * - `running`, `waiting` (optional): the split of `queue_depth`; when both are given they must
 *   add up to it. When one is given the other is the remainder; when neither is, all of
 *   `queue_depth` counts as running.
 * - `kv_cache_usage` (optional, 0–1), `free_memory_gib` (optional, GiB).
 * - `prompt_tokens_total`, `generation_tokens_total` (optional): cumulative counters; the
 *   generation counter drives the node's tokens-per-second estimate.
 * - `instance_id` (optional): changes when the serving process restarts or is replaced.
 *
 * Unknown fields are ignored, so servers may add their own.
 */
export const CustomHealthSchema = z
  .object({
    status: z.enum(CUSTOM_HEALTH_STATUSES),
    queue_depth: Count,
    running: Count.optional(),
    waiting: Count.optional(),
    kv_cache_usage: z.number().min(0).max(1).nullable().optional(),
    free_memory_gib: z.number().nonnegative().nullable().optional(),
    prompt_tokens_total: OptionalTotal,
    generation_tokens_total: OptionalTotal,
    instance_id: z.string().min(1).max(256).nullable().optional(),
  })
  .superRefine((doc, ctx) => {
    const { running, waiting, queue_depth: depth } = doc;
    if (running !== undefined && waiting !== undefined && running + waiting !== depth) {
      ctx.addIssue({
        code: "custom",
        path: ["queue_depth"],
        message: `queue_depth ${depth} is not running ${running} + waiting ${waiting}`,
      });
    } else if (running !== undefined && running > depth) {
      ctx.addIssue({ code: "custom", path: ["running"], message: "running exceeds queue_depth" });
    } else if (waiting !== undefined && waiting > depth) {
      ctx.addIssue({ code: "custom", path: ["waiting"], message: "waiting exceeds queue_depth" });
    }
  });
export type CustomHealth = z.infer<typeof CustomHealthSchema>;

/** A custom server's reading plus its own verdict on whether it can take traffic. */
export type CustomHealthReading = MetricsReading & {
  /** `true` only for `status: "ok"`. */
  readonly healthy: boolean;
  readonly status: CustomHealthStatus;
};

/**
 * Validates a custom health document (already JSON-parsed) and turns it into a reading.
 *
 * @throws {MetricsReadError} when the document does not match {@link CustomHealthSchema};
 * `missing` lists the offending fields as dotted paths.
 */
export function readCustomHealth(json: unknown): CustomHealthReading {
  const parsed = CustomHealthSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues;
    const fields = issues.map((issue) => issue.path.map(String).join(".") || "(document)");
    const detail = issues.map((issue, i) => `${fields[i]}: ${issue.message}`).join("; ");
    throw new MetricsReadError("custom", `invalid custom health document: ${detail}`, fields);
  }
  const doc = parsed.data;
  const depth = doc.queue_depth;
  const running = doc.running ?? (doc.waiting === undefined ? depth : depth - doc.waiting);
  return {
    healthy: doc.status === "ok",
    status: doc.status,
    running,
    waiting: depth - running,
    queueDepth: depth,
    kvCacheUsage: doc.kv_cache_usage ?? null,
    freeMemoryGib: doc.free_memory_gib ?? null,
    promptTokensTotal: doc.prompt_tokens_total ?? null,
    generationTokensTotal: doc.generation_tokens_total ?? null,
    // A custom document has no time-per-token histogram: capacity falls back to
    // tokens per second ÷ running (libs/routing README, "Formulas").
    tokenLatency: null,
    instanceId: doc.instance_id ?? null,
    prefixCache: null,
    prefill: null,
    kvCacheCapacityTokens: null,
    servedModels: null,
    slots: null,
  };
}
