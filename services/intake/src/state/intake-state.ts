import { openKv, watchKvIntoMap } from "@zml/bus";
import type { Bus, BusLogger, KvMap } from "@zml/bus";
import { AccountSpecSchema, KV_BUCKETS, ModelSpecSchema, PolicySpecSchema } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import type { Authenticator } from "../admission/auth.ts";
import type { KeyStoreStatus } from "../admission/key-store.ts";
import type { RateLimiter } from "../admission/rate-limit.ts";

/** The configuration intake reads on every request, mirrored in memory. */
export interface IntakeState {
  accounts: KvMap<AccountSpec>;
  models: KvMap<ModelSpec>;
  policies: KvMap<PolicySpec>;
  stop(): void;
}

/**
 * Watches accounts, models and policies into memory and keeps the key index and the rate
 * limiter in step with the accounts. Resolves once all three are loaded; the key store is
 * marked loaded from then on and follows the bus connection.
 */
export async function watchIntakeState(
  bus: Bus,
  log: BusLogger,
  parts: {
    auth: Authenticator;
    keyStore: KeyStoreStatus;
    rateLimiter: RateLimiter;
    clock: () => number;
  },
): Promise<IntakeState> {
  const [accounts, models, policies] = await Promise.all([
    openKv(bus, KV_BUCKETS.accounts).then((kv) =>
      watchKvIntoMap(bus, kv, {
        schema: AccountSpecSchema,
        log,
        onChange: (_key, _value, map) => {
          parts.auth.reindex(map.values());
          parts.rateLimiter.retain(new Set(map.keys()));
        },
      }),
    ),
    openKv(bus, KV_BUCKETS.models).then((kv) =>
      watchKvIntoMap(bus, kv, { schema: ModelSpecSchema, log }),
    ),
    openKv(bus, KV_BUCKETS.policies).then((kv) =>
      watchKvIntoMap(bus, kv, { schema: PolicySpecSchema, log }),
    ),
  ]);
  parts.auth.reindex(accounts.map.values());
  parts.keyStore.markLoaded();
  const unlisten = bus.onConnectionChange((connected) =>
    parts.keyStore.connectionChanged(connected, parts.clock()),
  );
  return {
    accounts,
    models,
    policies,
    stop() {
      unlisten();
      for (const w of [accounts, models, policies]) w.stop();
    },
  };
}
