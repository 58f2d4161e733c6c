import type { RateLimit } from "@zml/contracts";

export type RateDecision = { ok: true } | { ok: false; retryAfterS: number };

/**
 * Per-account token buckets. State lives in this process only: with N intake replicas an
 * account can get up to N times its limit (the limit is per replica, by design — no network
 * round trip on the request path).
 */
export interface RateLimiter {
  /** Takes one request token for `account` at `now`; accounts without a limit always pass. */
  take(account: string, limit: RateLimit | undefined, now: number): RateDecision;
  /** Drops buckets of accounts not in `accounts` (deleted accounts). */
  retain(accounts: ReadonlySet<string>): void;
}

interface Bucket {
  tokens: number;
  at: number;
}

export function createRateLimiter(): RateLimiter {
  const buckets = new Map<string, Bucket>();
  return {
    take(account, limit, now) {
      if (!limit) return { ok: true };
      const capacity = limit.burst ?? limit.requests_per_minute;
      const perMs = limit.requests_per_minute / 60_000;
      const b = buckets.get(account) ?? { tokens: capacity, at: now };
      // A lowered limit caps the stored tokens at once; time never runs backwards.
      b.tokens = Math.min(capacity, b.tokens + Math.max(0, now - b.at) * perMs);
      b.at = Math.max(b.at, now);
      buckets.set(account, b);
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return { ok: true };
      }
      return { ok: false, retryAfterS: Math.max(1, Math.ceil((1 - b.tokens) / perMs / 1000)) };
    },
    retain(accounts) {
      for (const id of buckets.keys()) if (!accounts.has(id)) buckets.delete(id);
    },
  };
}
