import type { Bus } from "@zml/bus";
import type { ModelSpec, PolicySpec } from "@zml/contracts";
import type { Authenticator } from "../admission/auth.ts";
import type { RateLimiter } from "../admission/rate-limit.ts";

/** What every client route reads: the bus, who is calling, and the configuration in memory. */
export interface ClientRouteDeps {
  bus: Bus;
  auth: Authenticator;
  rateLimiter: RateLimiter;
  models: ReadonlyMap<string, ModelSpec>;
  policies: ReadonlyMap<string, PolicySpec>;
  clock: () => number;
}
