/**
 * Capped exponential backoff: the pause before each retry grows by `factor` from `firstMs`
 * and stops growing at `maxMs`. Every retry loop and retry schedule uses this one rule, so
 * they all read the same and none drifts (a pause that doubles past its cap, an off-by-one
 * first pause).
 */
export interface CappedBackoff {
  /** The pause after the first failure. */
  firstMs: number;
  /** No pause is longer; a `firstMs` above it is cut to it too. */
  maxMs: number;
  /** How much each failure in a row multiplies the pause by; default 2 (doubling). */
  factor?: number;
}

/**
 * The pause after `failures` failures in a row: `firstMs · factor^(failures − 1)`, at most
 * `maxMs`. The first failure (1, or any count below it) gives `firstMs`. Pure; any count is
 * safe (a pause that would overflow is the cap).
 *
 * @throws RangeError when `firstMs` or `maxMs` is negative or not a number, `factor` is
 *   below 1 (a pause that shrinks is no backoff), or `failures` is not a number.
 */
export function backoffDelayMs(backoff: CappedBackoff, failures: number): number {
  const { firstMs, maxMs, factor = 2 } = backoff;
  if (!(firstMs >= 0) || !(maxMs >= 0) || !(factor >= 1)) {
    throw new RangeError(
      `backoff needs firstMs >= 0, maxMs >= 0 and factor >= 1 (got ${firstMs}, ${maxMs}, ${factor})`,
    );
  }
  if (Number.isNaN(failures)) throw new RangeError("backoff needs a count of failures");
  // Zero stays zero (0 · Infinity would be NaN once the power overflows).
  const grown = firstMs === 0 ? 0 : firstMs * factor ** Math.max(0, failures - 1);
  return Math.min(grown, maxMs);
}
