import { parseConfig } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z.object({
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  /** Port of /healthz, /readyz and /metrics. */
  DISPATCHER_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9101),
  DISPATCHER_OPS_HOST: z.string().default("127.0.0.1"),
  LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  /** Per-attempt limits on the call to a node. */
  DISPATCH_CONNECT_TIMEOUT_MS: z.coerce.number().int().positive().default(2_000),
  DISPATCH_HEADERS_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /** Longest silence between two body chunks before the stream counts as stalled. */
  DISPATCH_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /** Connections kept per node. */
  DISPATCH_POOL_CONNECTIONS: z.coerce.number().int().positive().default(64),
  /** How long a node that failed an attempt is skipped by every dispatcher. */
  NODE_COOLDOWN_MS: z.coerce.number().int().nonnegative().default(30_000),
  /**
   * JSON file of node credentials by reference (`{"provider-x": "sk-…"}`), for nodes whose
   * spec has `auth.secret_ref`. Read once at start; never logged.
   */
  ZML_NODE_SECRETS_FILE: z.string().optional(),
});

export type DispatcherConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): DispatcherConfig {
  return parseConfig(ConfigSchema, env);
}
