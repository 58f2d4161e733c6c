// What the deployment checks (compose.test.ts, k8s.test.ts) know about the four ZML services:
// their config keys and listening ports, read from each service's own config module.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";

const root = repoRoot();

export const SERVICE_TARGETS = [
  "intake",
  "dispatcher",
  "health-aggregator",
  "attestation",
] as const;
export type ServiceTarget = (typeof SERVICE_TARGETS)[number];

/** Config keys of each service's listening port and interface. */
export const LISTEN_KEYS: Record<ServiceTarget, { port: string; host: string }> = {
  intake: { port: "ZML_PORT", host: "ZML_HOST" },
  dispatcher: { port: "DISPATCHER_OPS_PORT", host: "DISPATCHER_OPS_HOST" },
  "health-aggregator": { port: "AGGREGATOR_OPS_PORT", host: "AGGREGATOR_OPS_HOST" },
  attestation: { port: "ATTESTATION_OPS_PORT", host: "ATTESTATION_OPS_HOST" },
};

/**
 * Config keys of the listener each service serves `/metrics` on, as deployed: intake's admin
 * listener (off the public port), the others' only one.
 */
export const METRICS_KEYS: Record<ServiceTarget, { port: string; host: string }> = {
  ...LISTEN_KEYS,
  intake: { port: "ZML_ADMIN_PORT", host: "ZML_ADMIN_HOST" },
};

/**
 * Variables every service may get besides its own config: read by the OTel SDK, Node and glibc
 * (the memory settings, libs/harness/src/service-flags.ts).
 */
export const STANDARD_ENV =
  /^(OTEL_[A-Z_]+|NODE_ENV|NODE_OPTIONS|NODE_COMPILE_CACHE|MALLOC_ARENA_MAX|MALLOC_[A-Z]+_THRESHOLD_)$/;

/** The keys of a service's config schema (the bus settings included). */
export function configKeys(target: ServiceTarget): Set<string> {
  let source = readFileSync(join(root, `services/${target}/src/config.ts`), "utf8");
  // The bus settings every service shares come from one shape in @zml/bus.
  if (source.includes("...BUS_CONFIG_SHAPE")) {
    source += readFileSync(join(root, "libs/bus/src/bus-config.ts"), "utf8");
  }
  if (source.includes("...SHUTDOWN_CONFIG_SHAPE")) {
    source += readFileSync(join(root, "libs/runtime/src/shutdown.ts"), "utf8");
  }
  if (source.includes("...NODE_ADDRESS_CONFIG_SHAPE")) {
    source += readFileSync(join(root, "libs/contracts/src/node-address.ts"), "utf8");
  }
  return new Set([...source.matchAll(/^\s+([A-Z][A-Z0-9_]+):\s/gm)].map((m) => m[1]!));
}

/** The service's own `loadConfig` on this environment (throws what the service would). */
export async function loadServiceConfig(target: ServiceTarget, env: Record<string, string>) {
  const mod = (await import(join(root, `services/${target}/src/config.ts`))) as {
    loadConfig(env: Record<string, string | undefined>): Record<string, unknown>;
  };
  return mod.loadConfig(env);
}

/** A nats-server size (`8MB`, `1048576`): units are powers of 1024, as nats-server reads them. */
export function natsSize(text: string): number {
  const m = /^(\d+)\s*(K|KB|M|MB|G|GB)?$/i.exec(text.trim());
  if (!m) throw new Error(`not a nats-server size: ${text}`);
  const unit = (m[2] ?? "").toUpperCase()[0];
  const scale = unit === "K" ? 1024 : unit === "M" ? 1024 ** 2 : unit === "G" ? 1024 ** 3 : 1;
  return Number(m[1]) * scale;
}
