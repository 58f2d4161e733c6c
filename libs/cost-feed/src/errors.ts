/**
 * Why a price could not be had, as a metric label and a log field:
 * - `throttled`: the provider's rate limit (after the client's own retries);
 * - `auth`: credentials refused or expired (AWS `AuthFailure`, HTTP 401/403);
 * - `credentials`: the feed could not load the account's credentials (file missing, bad JSON);
 * - `malformed`: an answer that is not the provider's format;
 * - `bad_price`: a price that is negative, zero, not a number or absurdly high;
 * - `unknown_instance_type`: the provider does not know the node's instance type / GPU;
 * - `not_found`: no spot price for the node's type in its region or zone;
 * - `unavailable`: the provider could not be reached or answered 5xx;
 * - `config`: the node's placement does not fit its account (region not registered).
 */
export const PRICE_ERROR_KINDS = [
  "throttled",
  "auth",
  "credentials",
  "malformed",
  "bad_price",
  "unknown_instance_type",
  "not_found",
  "unavailable",
  "config",
] as const;
export type PriceErrorKind = (typeof PRICE_ERROR_KINDS)[number];

/** Kinds that a later attempt can fix by itself; the rest wait for an operator. */
const RETRYABLE: ReadonlySet<PriceErrorKind> = new Set(["throttled", "malformed", "unavailable"]);

/** A price-source failure with its kind; messages never carry credentials. */
export class PriceSourceError extends Error {
  readonly code = "price_source_error";
  readonly kind: PriceErrorKind;
  readonly retryable: boolean;
  constructor(kind: PriceErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PriceSourceError";
    this.kind = kind;
    this.retryable = RETRYABLE.has(kind);
  }
}
