/** A Prometheus-style histogram: fixed upper bounds, counts per bound, sum and count. */
export interface Histogram {
  readonly bounds: readonly number[];
  /** Records `value` `times` times (per-token series observe once per token). */
  observe(value: number, times?: number): void;
  /** Cumulative count of observations `<= bounds[i]`, as `_bucket{le=...}` reports it. */
  cumulative(): number[];
  readonly sum: number;
  readonly count: number;
}

export function createHistogram(bounds: readonly number[]): Histogram {
  const perBucket = new Array<number>(bounds.length).fill(0);
  let sum = 0;
  let count = 0;
  return {
    bounds,
    observe(value, times = 1) {
      sum += value * times;
      count += times;
      // First bound >= value, by binary search; past the last bound it is only in +Inf.
      let lo = 0;
      let hi = bounds.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if ((bounds[mid] ?? Infinity) < value) lo = mid + 1;
        else hi = mid;
      }
      if (lo < bounds.length) perBucket[lo] = (perBucket[lo] ?? 0) + times;
    },
    cumulative() {
      let running = 0;
      return perBucket.map((n) => (running += n));
    },
    get sum() {
      return sum;
    },
    get count() {
      return count;
    },
  };
}

/** `count` bounds growing by `factor`, the first one `start * factor`. */
export function exponentialBounds(start: number, factor: number, count: number): number[] {
  const bounds: number[] = [];
  let bound = start;
  for (let i = 0; i < count; i++) {
    bound *= factor;
    bounds.push(bound);
  }
  return bounds;
}

/** `count` evenly spaced bounds ending at `max`. */
export function linearBounds(max: number, count: number): number[] {
  const step = max / count;
  return Array.from({ length: count }, (_, i) => step * (i + 1));
}
