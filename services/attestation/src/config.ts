import { parseConfig } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z.object({
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  ATTESTATION_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9103),
  ATTESTATION_OPS_HOST: z.string().default("127.0.0.1"),
  LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
});

export type AttestationConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): AttestationConfig {
  return parseConfig(ConfigSchema, env);
}
