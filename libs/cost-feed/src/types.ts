import type { CloudAccountSpec } from "@zml/contracts";
import type { PriceSourceError } from "./errors.ts";

/** One node whose price a source looks up. */
export interface PriceTarget {
  nodeId: string;
  region: string;
  zone: string | undefined;
  instanceType: string;
  gpuType: string | undefined;
  gpusPerInstance: number;
}

/** A node's spot price, normalised to USD per GPU-hour. */
export interface PriceQuote {
  nodeId: string;
  usdPerGpuHour: number;
  /** When the provider says the price took effect (epoch ms), when it says. */
  quotedAt: number | undefined;
  /** e.g. `aws:DescribeSpotPriceHistory`. */
  source: string;
}

/** A node that got no price this time, and why. */
export interface PriceProblem {
  nodeId: string;
  error: PriceSourceError;
}

export interface PriceResult {
  quotes: PriceQuote[];
  problems: PriceProblem[];
}

/**
 * One provider's prices. `fetch` throws {@link PriceSourceError} when the whole call failed
 * (throttled, credentials refused, provider down); per-node failures are `problems`.
 */
export interface PriceSource {
  fetch(
    account: CloudAccountSpec,
    targets: readonly PriceTarget[],
    signal: AbortSignal,
  ): Promise<PriceResult>;
}
