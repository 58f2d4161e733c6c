import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import { NODE_ADDRESS_CONFIG_SHAPE } from "@zml/contracts";
import { BUS_CONFIG_SHAPE, requireBusIdentity } from "@zml/bus";
import { parseConfig, SHUTDOWN_CONFIG_SHAPE } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z
  .object({
    ...BUS_CONFIG_SHAPE,
    ...SHUTDOWN_CONFIG_SHAPE,
    /** Where nodes may be, checked on every probe connection after DNS (docs/limits.md). */
    ...NODE_ADDRESS_CONFIG_SHAPE,
    AGGREGATOR_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9102),
    AGGREGATOR_OPS_HOST: z.string().default("127.0.0.1"),
    LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
    /** How often every node is polled. */
    POLL_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
    /** Each poll is moved by up to this fraction of the interval so polls do not bunch up. */
    POLL_JITTER: z.coerce.number().min(0).max(0.5).default(0.1),
    /** One probe (health plus metrics) gives up after this long. */
    PROBE_TIMEOUT_MS: z.coerce.number().int().positive().default(2_000),
    /** Largest health or metrics answer a probe reads; a larger one fails the probe. */
    PROBE_MAX_BODY_BYTES: z.coerce
      .number()
      .int()
      .positive()
      .default(4 * 1024 * 1024),
    /** Probes running at once across all nodes. */
    PROBE_CONCURRENCY: z.coerce.number().int().positive().default(32),
    /** A node's state is re-published at least this often even when nothing changed. */
    HEARTBEAT_MS: z.coerce.number().int().positive().default(15_000),
    /** This replica's id in the replicas bucket; default: host name, pid and a random part. */
    AGGREGATOR_REPLICA_ID: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, "letters, digits, '-' and '_', at most 64")
      .optional(),
    /**
     * A replica not heard of for this long is dead and its nodes move to the others (default:
     * three poll intervals). Replicas heartbeat every third of it.
     */
    REPLICA_TTL_MS: z.coerce.number().int().positive().optional(),
    /** Runs the spot-price feed of the cloud accounts this replica owns (see docs/cost-feed.md). */
    COST_FEED_ENABLED: z
      .enum(["true", "false"])
      .default("true")
      .transform((v) => v === "true"),
    /** Each account's refresh moves by up to this fraction of its interval. */
    COST_FEED_JITTER: z.coerce.number().min(0).max(0.5).default(0.1),
    /** EC2 endpoint for every region instead of AWS's own (a proxy, or a local fake). */
    COST_FEED_AWS_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
    /** Attempts per EC2 call, the SDK's own retries of throttling and 5xx included. */
    COST_FEED_AWS_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(10).default(3),
    /** Base URL of the Azure Retail Prices API. */
    COST_FEED_AZURE_URL: z.url({ protocol: /^https?$/ }).default("https://prices.azure.com"),
    /** Base URL of the Cloud Billing Catalog API. */
    COST_FEED_GCP_URL: z
      .url({ protocol: /^https?$/ })
      .default("https://cloudbilling.googleapis.com"),
    /** First isolation period of a failing node; repeated isolations double it. */
    ISOLATION_BASE_MS: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_HEALTH_CONFIG.isolationBaseMs),
    /**
     * How far back dispatch outcomes count toward a node's error rate. A node demoted for its
     * error rate gets no traffic, so it is readmitted once its failures have aged out of it.
     */
    ERROR_WINDOW_MS: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_HEALTH_CONFIG.errorWindowMs),
    /** Longest isolation period. */
    ISOLATION_MAX_MS: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_HEALTH_CONFIG.isolationMaxMs),
  })
  .transform((c) => ({ ...c, REPLICA_TTL_MS: c.REPLICA_TTL_MS ?? 3 * c.POLL_INTERVAL_MS }))
  .refine((c) => c.ISOLATION_MAX_MS >= c.ISOLATION_BASE_MS, {
    message: "must be at least ISOLATION_BASE_MS",
    path: ["ISOLATION_MAX_MS"],
  })
  .refine(...requireBusIdentity);

export type AggregatorConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): AggregatorConfig {
  return parseConfig(ConfigSchema, env);
}
