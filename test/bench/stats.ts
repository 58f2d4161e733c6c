import type { Percentiles } from "./plan.ts";

/** Nearest-rank percentile `q` (0–1) of ascending `sorted`; NaN when empty. */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil(q * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** p50 and p99 of the samples (sorted in place). */
export function percentiles(samples: Float64Array): Percentiles {
  samples.sort();
  return {
    p50: quantile(samples, 0.5),
    p99: quantile(samples, 0.99),
    max: quantile(samples, 1),
    count: samples.length,
  };
}

/** Median of the finite values; NaN when there are none. */
export function median(values: number[]): number {
  const finite = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (finite.length === 0) return Number.NaN;
  const mid = finite.length >> 1;
  return finite.length % 2 === 1 ? finite[mid]! : (finite[mid - 1]! + finite[mid]!) / 2;
}

/** Growable sample buffer: one allocation per doubling, no boxing. */
export class Samples {
  private data = new Float64Array(1024);
  private size = 0;

  push(value: number): void {
    if (this.size === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.size++] = value;
  }

  percentiles(): Percentiles {
    return percentiles(this.data.slice(0, this.size));
  }
}
