// Brute-force protection for API keys and the admin token: each client address may fail
// authentication `burst` times, then `perMinute` times a minute. A throttled address is
// refused before its credential is even checked, so a guess that happens to be right is
// indistinguishable from a wrong one until the address has waited.

export interface AuthThrottleOptions {
  /** Failures an address may have in a row before it is throttled. */
  burst: number;
  /** Failures per minute it may have after that (the bucket's refill rate). */
  perMinute: number;
  /** Addresses remembered at most; the oldest is forgotten first. Bounds memory under a spray. */
  maxAddresses: number;
}

export interface AuthThrottle {
  /** Seconds until `address` may try again, or undefined when it may try now. */
  blockedFor(address: string, now: number): number | undefined;
  /** Counts one failed authentication from `address`. */
  recordFailure(address: string, now: number): void;
}

interface Bucket {
  tokens: number;
  at: number;
}

export function createAuthThrottle(options: AuthThrottleOptions): AuthThrottle {
  const { burst, maxAddresses } = options;
  const perMs = options.perMinute / 60_000;
  const buckets = new Map<string, Bucket>();
  const refill = (b: Bucket, now: number) => {
    b.tokens = Math.min(burst, b.tokens + Math.max(0, now - b.at) * perMs);
    b.at = Math.max(b.at, now);
  };
  return {
    blockedFor(address, now) {
      const b = buckets.get(address);
      if (!b) return undefined;
      refill(b, now);
      if (b.tokens >= burst) buckets.delete(address); // fully recovered: forget it
      if (b.tokens >= 1) return undefined;
      return Math.max(1, Math.ceil((1 - b.tokens) / perMs / 1000));
    },
    recordFailure(address, now) {
      let b = buckets.get(address);
      if (b) {
        refill(b, now);
        buckets.delete(address); // re-inserted below: most recent last
      } else {
        b = { tokens: burst, at: now };
        if (buckets.size >= maxAddresses) {
          const oldest = buckets.keys().next().value;
          if (oldest !== undefined) buckets.delete(oldest);
        }
      }
      b.tokens = Math.max(0, b.tokens - 1);
      buckets.set(address, b);
    },
  };
}
