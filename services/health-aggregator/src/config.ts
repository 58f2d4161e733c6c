import { parseConfig } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z.object({
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  AGGREGATOR_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9102),
  AGGREGATOR_OPS_HOST: z.string().default("127.0.0.1"),
  LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  /** How often every node is polled. */
  POLL_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
  /** Each poll is moved by up to this fraction of the interval so polls do not bunch up. */
  POLL_JITTER: z.coerce.number().min(0).max(0.5).default(0.1),
  /** One probe (health plus metrics) gives up after this long. */
  PROBE_TIMEOUT_MS: z.coerce.number().int().positive().default(2_000),
  /** Probes running at once across all nodes. */
  PROBE_CONCURRENCY: z.coerce.number().int().positive().default(32),
  /** A node's state is re-published at least this often even when nothing changed. */
  HEARTBEAT_MS: z.coerce.number().int().positive().default(15_000),
});

export type AggregatorConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): AggregatorConfig {
  return parseConfig(ConfigSchema, env);
}
