import { createHash } from "node:crypto";
import { connectBus, createReplyMux, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { KV_BUCKETS } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { startNatsServer } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { createLogger, createMetrics } from "@zml/telemetry";
import { createKvConfigStore } from "../src/admin/store.ts";
import { watchAllowlistFeed } from "../src/allowlist-feed.ts";
import { buildApp } from "../src/app.ts";
import type { IntakeDeps } from "../src/app.ts";
import { createAuthenticator } from "../src/auth.ts";
import { createKeyStoreStatus } from "../src/key-store.ts";
import { createRateLimiter } from "../src/rate-limit.ts";
import { watchIntakeState } from "../src/state.ts";

export const API_KEY = "intake-test-key-0123456789";
export const LIMITED_KEY = "intake-limited-key-0123456789";
export const ADMIN_TOKEN = "intake-admin-token-0123456789";
export const quietLog = { info() {}, warn() {}, error() {} };
export const sha = (s: string) => createHash("sha256").update(s).digest("hex");

export const ACCOUNTS: AccountSpec[] = [
  { id: "main", api_key_sha256: [sha(API_KEY)], allowed_tiers: [1, 2] },
  {
    id: "limited",
    api_key_sha256: [sha(LIMITED_KEY)],
    allowed_tiers: [1],
    rate_limit: { requests_per_minute: 1, burst: 2 },
  },
];
export const MODELS: ModelSpec[] = [{ id: "m1" }, { id: "m2" }, { id: "org/m3" }];
export const POLICIES: PolicySpec[] = [
  {
    name: "fast",
    accelerator_preference: [{ family: "H100", priority: 1 }],
    latency_target_ms: 1000,
    cost_priority: "latency",
    queue_on_saturation: false,
    max_queue_ms: 0,
  },
];

export interface Harness {
  nats: NatsServerHandle;
  bus: Bus;
  app: Awaited<ReturnType<typeof buildApp>>;
  url: string;
  close(): Promise<void>;
}

export type ConfigOverrides = Partial<IntakeDeps["config"]>;

/** Seeds the configuration buckets, as `zml apply` would. */
export async function seed(bus: Bus): Promise<void> {
  const put = async (bucket: string, key: string, value: unknown) =>
    (await openKv(bus, bucket)).put(key, JSON.stringify(value));
  for (const a of ACCOUNTS) await put(KV_BUCKETS.accounts, a.id, a);
  for (const m of MODELS) await put(KV_BUCKETS.models, m.id, m);
  for (const p of POLICIES) await put(KV_BUCKETS.policies, p.name, p);
}

/** A real nats-server, the intake app wired as `main.ts` wires it, listening on port 0. */
export async function startIntake(
  options: {
    config?: ConfigOverrides;
    tls?: IntakeDeps["tls"];
    nats?: NatsServerHandle;
    keyStoreMaxStaleMs?: number;
  } = {},
): Promise<Harness> {
  const nats = options.nats ?? (await startNatsServer());
  const bus = await connectBus({ servers: nats.url, name: "intake-test", log: quietLog });
  await seed(bus);
  const keyStore = createKeyStoreStatus(options.keyStoreMaxStaleMs ?? 30_000);
  const auth = createAuthenticator(keyStore);
  const rateLimiter = createRateLimiter();
  const state = await watchIntakeState(bus, quietLog, {
    auth,
    keyStore,
    rateLimiter,
    clock: Date.now,
  });
  const allowlist = await watchAllowlistFeed(bus, quietLog);
  const mux = createReplyMux(bus);
  const app = await buildApp({
    bus,
    mux,
    auth,
    rateLimiter,
    models: state.models.map,
    policies: state.policies.map,
    configStore: createKvConfigStore(bus),
    allowlist,
    registry: createMetrics({ service: "intake-test" }).registry,
    log: createLogger({ service: "intake-test", level: "silent" }),
    config: {
      ZML_BODY_LIMIT_BYTES: 64 * 1024,
      ZML_REQUEST_TIMEOUT_MS: 10_000,
      ZML_HEADERS_TIMEOUT_MS: 5_000,
      ZML_BODY_TIMEOUT_MS: 5_000,
      ZML_IDLE_TIMEOUT_MS: 5_000,
      ZML_H2C: true,
      ZML_ADMIN_TOKEN: ADMIN_TOKEN,
      ...options.config,
    },
    tls: options.tls,
    clock: Date.now,
    isReady: () => bus.isConnected(),
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = app.server.address() as { port: number };
  return {
    nats,
    bus,
    app,
    url: `${options.tls ? "https" : "http"}://127.0.0.1:${port}`,
    async close() {
      await app.close();
      mux.close();
      state.stop();
      allowlist.stop();
      await bus.drain();
      if (!options.nats) await nats.stop();
    },
  };
}

export const auth = (key = API_KEY) => ({
  authorization: `Bearer ${key}`,
  "content-type": "application/json",
});
export const admin = (token = ADMIN_TOKEN) => ({
  authorization: `Bearer ${token}`,
  "content-type": "application/json",
});

/** The OpenAI error envelope's fields, for compact assertions. */
export function errorOf(body: string): { code: string; param: string | null; type: string } {
  const e = (JSON.parse(body) as { error: { code: string; param: string | null; type: string } })
    .error;
  return { code: e.code, param: e.param, type: e.type };
}
