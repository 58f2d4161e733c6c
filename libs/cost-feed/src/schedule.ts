import { backoffDelayMs } from "@zml/contracts";
import type { PriceErrorKind } from "./errors.ts";

export interface DelayInput {
  intervalMs: number;
  /** Fraction (0–0.5) of the delay each refresh moves by at random, so feeds do not bunch. */
  jitter: number;
  /** In [0, 1). */
  random: number;
  /** Refreshes failed in a row (0 after a success). */
  failures: number;
  /** Kind of the last failure, when `failures > 0`. */
  kind?: PriceErrorKind | undefined;
}

/** First retry after a failure the provider may fix by itself (a blip, an outage). */
export const FIRST_RETRY_MS = 5_000;

/**
 * How long to wait before an account's next refresh. Pure.
 * - after a success: the interval;
 * - after an error the provider may fix (outage, malformed answer): 5 s, doubling per
 *   failure, never beyond the interval, so that a blip is retried well before the price
 *   ages out;
 * - after throttling or refused credentials: the interval, doubling per failure up to four
 *   intervals: hammering a rate limit or a locked account only prolongs it.
 * Every delay moves by ±`jitter`.
 */
export function nextDelayMs(input: DelayInput): number {
  const { intervalMs, failures } = input;
  let base: number;
  if (failures <= 0) base = intervalMs;
  else if (input.kind === "throttled" || input.kind === "auth" || input.kind === "credentials") {
    base = backoffDelayMs({ firstMs: intervalMs, maxMs: 4 * intervalMs }, failures);
  } else base = backoffDelayMs({ firstMs: FIRST_RETRY_MS, maxMs: intervalMs }, failures);
  const jitter = Math.min(0.5, Math.max(0, input.jitter));
  return Math.max(1, Math.round(base * (1 + jitter * (2 * input.random - 1))));
}
