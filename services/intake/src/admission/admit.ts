import { ZmlError } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";
import type { Authenticator } from "./auth.ts";
import type { RateLimiter } from "./rate-limit.ts";

/**
 * Authenticates the API key and takes one token of the account's rate limit. Throws
 * ZmlError `unauthorized` (401), `key_store_unavailable` (503) or `rate_limited` (429).
 */
export function admit(
  deps: { auth: Authenticator; rateLimiter: RateLimiter },
  authorization: string | undefined,
  now: number,
): AccountSpec {
  const account = deps.auth.authenticate(authorization, now);
  const decision = deps.rateLimiter.take(account.id, account.rate_limit, now);
  if (!decision.ok) {
    throw new ZmlError("rate_limited", "rate limit exceeded for this account", {
      retryAfterS: decision.retryAfterS,
    });
  }
  return account;
}
