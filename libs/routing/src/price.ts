import type { NodeSpec } from "@zml/contracts";
import type { CostEntry } from "./schemas.ts";

/**
 * Where the price routing uses for a node comes from:
 * - `spot`: a cloud spot price younger than its age limit;
 * - `on_prem`: the operator's cost per GPU-hour (never ages);
 * - `fallback`: the node's configured `cloud.fallback_usd_per_gpu_hour`, because its spot
 *   price aged out (`stale`) or none has arrived yet;
 * - `none`: no usable price; the node is ranked at the highest known price.
 */
export type PriceSource = "spot" | "on_prem" | "fallback" | "none";

/** The price of one node at one instant, and how it was arrived at. */
export interface NodePrice {
  readonly source: PriceSource;
  /** Node-hour price routing uses (`usd_per_gpu_hour × GPUs`); `null` when `none`. */
  readonly usdPerHour: number | null;
  /** When the spot price was last confirmed (epoch ms); `null` without a spot entry. */
  readonly updatedAt: number | null;
  /** Age limit of the spot price in ms; `null` without a spot entry. */
  readonly maxAgeMs: number | null;
  /** A spot price exists but is past its age limit, so it was not used. */
  readonly stale: boolean;
  /**
   * The instant this resolution stops holding: a fresh spot price's expiry, else Infinity.
   * The snapshot is rebuilt then, so that {@link decide} never compares clocks per node.
   */
  readonly validUntil: number;
}

const NONE: NodePrice = Object.freeze({
  source: "none",
  usdPerHour: null,
  updatedAt: null,
  maxAgeMs: null,
  stale: false,
  validUntil: Number.POSITIVE_INFINITY,
});

/**
 * Resolves the price of `node` at `now` from its cost entry (node or family scoped, or
 * none). Pure. A spot entry dated after `now` (clock skew between hosts) counts as fresh.
 */
export function resolveNodePrice(
  node: NodeSpec,
  entry: CostEntry | null,
  now: number,
  defaultMaxAgeMs: number,
): NodePrice {
  if (entry !== null && entry.kind === "on_prem") {
    return Object.freeze({
      ...NONE,
      source: "on_prem",
      usdPerHour: entry.usd_per_gpu_hour * entry.gpus_per_node,
    });
  }
  const fallback = fallbackRate(node);
  if (entry === null) {
    return fallback === null
      ? NONE
      : Object.freeze({ ...NONE, source: "fallback", usdPerHour: fallback });
  }
  const maxAgeMs = entry.max_age_ms ?? defaultMaxAgeMs;
  const validUntil = entry.updated_at + maxAgeMs;
  if (now < validUntil) {
    return Object.freeze({
      source: "spot",
      usdPerHour: entry.usd_per_gpu_hour * entry.gpus_per_node,
      updatedAt: entry.updated_at,
      maxAgeMs,
      stale: false,
      validUntil,
    });
  }
  return Object.freeze({
    source: fallback === null ? "none" : "fallback",
    usdPerHour: fallback,
    updatedAt: entry.updated_at,
    maxAgeMs,
    stale: true,
    validUntil: Number.POSITIVE_INFINITY,
  });
}

/** The node's configured node-hour rate, or `null` when it has none. */
function fallbackRate(node: NodeSpec): number | null {
  const cloud = node.cloud;
  if (cloud?.fallback_usd_per_gpu_hour === undefined) return null;
  return cloud.fallback_usd_per_gpu_hour * cloud.gpus_per_instance;
}

/** Seconds since the price was last confirmed at `now` (0 for prices that do not age). */
export function priceAgeS(price: NodePrice, now: number): number {
  return price.updatedAt === null ? 0 : Math.max(0, Math.floor((now - price.updatedAt) / 1000));
}

/** How one cost-table entry stands at an instant, for operators (`zml get costs`, admin API). */
export interface CostEntryStatus {
  /** `spot` feed name (e.g. `aws:DescribeSpotPriceHistory`), `manual` or `on_prem`. */
  source: string;
  /** Seconds since the price was confirmed; `null` for on-prem prices, which do not age. */
  age_s: number | null;
  /** The age limit in seconds; `null` for on-prem prices. */
  max_age_s: number | null;
  /** Past its age limit: routing uses the nodes' fallback rates instead. */
  stale: boolean;
}

/** The status of one cost entry at `now`, by the same rule routing applies. Pure. */
export function costEntryStatus(
  entry: CostEntry,
  now: number,
  defaultMaxAgeMs: number,
): CostEntryStatus {
  if (entry.kind === "on_prem")
    return { source: "on_prem", age_s: null, max_age_s: null, stale: false };
  const maxAgeMs = entry.max_age_ms ?? defaultMaxAgeMs;
  return {
    source: entry.source ?? "manual",
    age_s: Math.max(0, Math.floor((now - entry.updated_at) / 1000)),
    max_age_s: Math.round(maxAgeMs / 1000),
    stale: now >= entry.updated_at + maxAgeMs,
  };
}
