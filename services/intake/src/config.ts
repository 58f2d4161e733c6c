import { NODE_ADDRESS_CONFIG_SHAPE } from "@zml/contracts";
import { BUS_CONFIG_SHAPE, requireBusIdentity } from "@zml/bus";
import { parseConfig, SHUTDOWN_CONFIG_SHAPE } from "@zml/runtime";
import { adminTokenWeakness } from "./admin/token.ts";
import { z } from "zod";

const flag = z
  .enum(["1", "0", "true", "false", "yes", "no"])
  .transform((v) => v === "1" || v === "true" || v === "yes");

const ConfigSchema = z
  .object({
    ...BUS_CONFIG_SHAPE,
    ...SHUTDOWN_CONFIG_SHAPE,
    ZML_HOST: z.string().default("0.0.0.0"),
    ZML_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
    LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
    /** Largest request body accepted; larger bodies get 413 `payload_too_large`. */
    ZML_BODY_LIMIT_BYTES: z.coerce
      .number()
      .int()
      .positive()
      .default(4 * 1024 * 1024),
    /**
     * Answer bytes held for one client that reads slower than its node writes; past this the
     * client is cut off and the node call cancelled.
     */
    ZML_CLIENT_BUFFER_MAX_BYTES: z.coerce
      .number()
      .int()
      .positive()
      .default(8 * 1024 * 1024),
    /** How long a client waits for a routed answer, and the longest silence mid-stream. */
    ZML_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(120_000),
    /**
     * How long a job submission (`POST /v1/jobs`) keeps trying to reach JetStream, e.g.
     * while the jobs stream elects a new leader after a server loss (5–7 s measured), before
     * it is answered 503 `bus_unavailable` with `Retry-After`.
     */
    ZML_JOB_SUBMIT_TIMEOUT_MS: z.coerce.number().int().min(0).max(120_000).default(10_000),
    /**
     * A dispatcher replica silent this long (no liveness beat) is lost: the requests it
     * accepted end at once, re-routed or with 503 `dispatcher_lost`, instead of at the
     * request timeout. At least 3 of the replica's beat intervals are always allowed.
     */
    ZML_DISPATCHER_LOSS_MS: z.coerce.number().int().min(100).max(600_000).default(1_000),
    /**
     * How many times a request whose dispatcher was lost before any byte reached the client
     * is sent again (to another replica); past that it gets 503 `dispatcher_lost`.
     */
    ZML_DISPATCHER_REROUTES: z.coerce.number().int().min(0).max(3).default(1),
    /** Slow-header (slowloris) protection. */
    ZML_HEADERS_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
    /** Time allowed to receive a whole request body; slower uploads get 408. */
    ZML_BODY_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
    /** Idle keep-alive connections and HTTP/2 sessions are closed after this. */
    ZML_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(65_000),
    /** PEM certificate and key: when both are set, intake serves TLS with ALPN h2/http1.1. */
    ZML_TLS_CERT_FILE: z.string().min(1).optional(),
    ZML_TLS_KEY_FILE: z.string().min(1).optional(),
    /** Offer cleartext HTTP/2 (prior knowledge) beside HTTP/1.1 when TLS is off. */
    ZML_H2C: flag.default(true),
    /**
     * How long the in-memory copy of the accounts may serve after the bus went away. Past
     * it, requests get 503 `key_store_unavailable` rather than a verdict on stale keys.
     */
    ZML_KEY_STORE_MAX_STALE_MS: z.coerce.number().int().nonnegative().default(30_000),
    /**
     * Failed authentications (API key or admin token) one client address may have in a row,
     * then how many a minute; past that it gets 429 `auth_throttled` with `Retry-After`.
     */
    ZML_AUTH_FAILURE_BURST: z.coerce.number().int().positive().default(20),
    ZML_AUTH_FAILURES_PER_MINUTE: z.coerce.number().positive().default(10),
    /** Fresh-nonce attestation calls (`?nonce=`) per account and minute: each costs a quote. */
    ZML_ATTESTATION_NONCE_PER_MINUTE: z.coerce.number().int().positive().default(6),
    /** Where the admin API lets nodes be registered (docs/limits.md). */
    ...NODE_ADDRESS_CONFIG_SHAPE,
    /** Admin API bearer token; the admin API answers 404 when unset. */
    ZML_ADMIN_TOKEN: z.string().min(16, "at least 16 characters").optional(),
    /**
     * `dev` relaxes the admin token rules (the dev launcher sets it); anything else is treated
     * as production.
     */
    ZML_ENV: z.enum(["production", "dev"]).default("production"),
    /**
     * A second listener for the admin API, `/metrics` and `/openapi.json`, which then leave
     * the public port (health and readiness stay on both). Unset: one port serves all.
     */
    ZML_ADMIN_PORT: z.coerce.number().int().min(0).max(65535).optional(),
    /** Interface of the admin listener; loopback unless scrapers and operators come from elsewhere. */
    ZML_ADMIN_HOST: z.string().default("127.0.0.1"),
    /**
     * Seed of the `admin` bus identity the admin API writes configuration with; intake's
     * own identity may only read it.
     */
    ZML_ADMIN_NATS_NKEY_SEED_FILE: z.string().min(1).optional(),
  })
  .refine((c) => (c.ZML_TLS_CERT_FILE === undefined) === (c.ZML_TLS_KEY_FILE === undefined), {
    message: "set both ZML_TLS_CERT_FILE and ZML_TLS_KEY_FILE, or neither",
    path: ["ZML_TLS_KEY_FILE"],
  })
  .refine(...requireBusIdentity)
  .superRefine((c, ctx) => {
    if (c.ZML_ADMIN_TOKEN === undefined || c.ZML_ENV === "dev") return;
    const weakness = adminTokenWeakness(c.ZML_ADMIN_TOKEN);
    if (weakness !== undefined) {
      ctx.addIssue({
        code: "custom",
        message: `too weak outside dev (ZML_ENV=dev): ${weakness}`,
        path: ["ZML_ADMIN_TOKEN"],
      });
    }
  })
  .refine(
    (c) =>
      c.ZML_ADMIN_TOKEN === undefined ||
      c.NATS_INSECURE ||
      c.ZML_ADMIN_NATS_NKEY_SEED_FILE !== undefined,
    {
      message: "required with ZML_ADMIN_TOKEN: the admin API writes with the admin bus identity",
      path: ["ZML_ADMIN_NATS_NKEY_SEED_FILE"],
    },
  );

export type IntakeConfig = z.output<typeof ConfigSchema>;

const FIXES = {
  ZML_ADMIN_TOKEN:
    "set ZML_ADMIN_TOKEN to a random secret of at least 24 characters (e.g. `openssl rand -hex 24`), or unset it to turn the admin API off",
  ZML_TLS_KEY_FILE: "set both ZML_TLS_CERT_FILE and ZML_TLS_KEY_FILE to PEM files, or unset both",
};

export function loadConfig(env: Record<string, string | undefined>): IntakeConfig {
  return parseConfig(ConfigSchema, env, FIXES);
}
