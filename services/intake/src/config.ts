import { parseConfig } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z.object({
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  ZML_HOST: z.string().default("0.0.0.0"),
  ZML_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  /** Largest request body accepted; larger bodies get 413 `payload_too_large`. */
  ZML_BODY_LIMIT_BYTES: z.coerce.number().int().positive().default(4 * 1024 * 1024),
  /** How long a client waits for a routed answer, and the longest silence mid-stream. */
  ZML_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(120_000),
  /** Slow-header (slowloris) protection. */
  ZML_HEADERS_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
});

export type IntakeConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): IntakeConfig {
  return parseConfig(ConfigSchema, env);
}
