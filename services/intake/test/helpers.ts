import { createHash } from "node:crypto";
import { connectBus, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { KV_BUCKETS } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { startNatsServer } from "@zml/harness";
import type { NatsClusterHandle, NatsServerHandle } from "@zml/harness";
import { createLogger, createMetrics } from "@zml/telemetry";
import { startIntake as startIntakeApp } from "../src/app.ts";
import type { Intake, IntakeDeps } from "../src/app.ts";
import type { IntakeConfig } from "../src/config.ts";

export const API_KEY = "intake-test-key-0123456789";
export const LIMITED_KEY = "intake-limited-key-0123456789";
export const ADMIN_TOKEN = "intake-Zr8Kq2Lm5Vx9Tn4Wb7Yc";
export const quietLog = { info() {}, warn() {}, error() {} };
export const sha = (s: string) => createHash("sha256").update(s).digest("hex");

export const ACCOUNTS: AccountSpec[] = [
  { id: "main", api_key_sha256: [sha(API_KEY)], allowed_tiers: [1, 2, 4] },
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
    prefix_affinity: true,
  },
];

export interface Harness {
  /** The single server (not set on a cluster). */
  nats: NatsServerHandle;
  bus: Bus;
  app: Intake["app"];
  url: string;
  /** Set when `ZML_ADMIN_PORT` gave the admin API a listener of its own. */
  adminUrl: string | undefined;
  close(): Promise<void>;
}

export type ConfigOverrides = Partial<
  IntakeDeps["config"] & Pick<IntakeConfig, "ZML_ADMIN_PORT" | "ZML_ADMIN_HOST">
>;

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
    /** Runs on this cluster instead (its servers are the caller's to stop). */
    cluster?: NatsClusterHandle;
    keyStoreMaxStaleMs?: number;
  } = {},
): Promise<Harness> {
  const nats = options.nats ?? (options.cluster ? undefined : await startNatsServer());
  const client = options.cluster?.client() ?? nats!.client();
  const bus = await connectBus({ ...client, name: "intake-test", log: quietLog });
  await seed(bus);
  const intake = await startIntakeApp({
    bus,
    registry: createMetrics({ service: "intake-test" }).registry,
    log: createLogger({ service: "intake-test", level: "silent" }),
    config: {
      ZML_HOST: "127.0.0.1",
      ZML_PORT: 0,
      ZML_KEY_STORE_MAX_STALE_MS: options.keyStoreMaxStaleMs ?? 30_000,
      ZML_BODY_LIMIT_BYTES: 64 * 1024,
      ZML_REQUEST_TIMEOUT_MS: 10_000,
      ZML_JOB_SUBMIT_TIMEOUT_MS: 2_000,
      ZML_HEADERS_TIMEOUT_MS: 5_000,
      ZML_BODY_TIMEOUT_MS: 5_000,
      ZML_IDLE_TIMEOUT_MS: 5_000,
      ZML_H2C: true,
      ZML_ADMIN_TOKEN: ADMIN_TOKEN,
      ZML_AUTH_FAILURE_BURST: 20,
      ZML_AUTH_FAILURES_PER_MINUTE: 10,
      ZML_ATTESTATION_NONCE_PER_MINUTE: 6,
      ZML_CLIENT_BUFFER_MAX_BYTES: 8 * 1024 * 1024,
      ZML_DISPATCHER_LOSS_MS: 1_000,
      ZML_DISPATCHER_REROUTES: 1,
      ZML_NODE_ALLOW_CIDRS: [],
      ZML_NODE_DENY_CIDRS: [],
      ZML_NODE_ALLOW_LOOPBACK: false,
      ZML_ADMIN_HOST: "127.0.0.1",
      ...options.config,
    },
    tls: options.tls,
    clock: Date.now,
  });
  return {
    nats: nats!,
    bus,
    app: intake.app,
    url: intake.url,
    adminUrl: intake.adminUrl,
    async close() {
      await intake.stop();
      await bus.drain();
      if (!options.nats) await nats?.stop();
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
