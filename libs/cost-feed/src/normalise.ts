import { PriceSourceError } from "./errors.ts";

/**
 * Highest believable price per GPU-hour. The dearest on-demand GPU instances cost about
 * USD 12 per GPU-hour; a hundred is a unit mistake (a monthly price, cents vs dollars) or a
 * broken answer, and routing on it would send every request elsewhere.
 */
export const MAX_USD_PER_GPU_HOUR = 100;

/**
 * An instance-hour price as the provider sent it (a decimal string or a number) turned into
 * USD per GPU-hour; throws {@link PriceSourceError} `bad_price` for anything that is not a
 * positive, believable price.
 */
export function perGpuHour(instancePrice: unknown, gpusPerInstance: number, what: string): number {
  const value =
    typeof instancePrice === "number"
      ? instancePrice
      : typeof instancePrice === "string" && /^\s*[-+]?\d+(\.\d+)?\s*$/.test(instancePrice)
        ? Number(instancePrice)
        : Number.NaN;
  if (!Number.isFinite(value)) {
    throw new PriceSourceError(
      "bad_price",
      `${what}: price ${JSON.stringify(instancePrice)} is not a number`,
    );
  }
  if (value <= 0)
    throw new PriceSourceError("bad_price", `${what}: price ${value} is not positive`);
  const perGpu = value / gpusPerInstance;
  if (perGpu > MAX_USD_PER_GPU_HOUR) {
    throw new PriceSourceError(
      "bad_price",
      `${what}: ${perGpu.toFixed(2)} USD per GPU-hour is above the believable ${MAX_USD_PER_GPU_HOUR}`,
    );
  }
  // Cents of a cent are noise; rounding keeps unchanged prices byte-identical between polls.
  return Math.round(perGpu * 1e6) / 1e6;
}
