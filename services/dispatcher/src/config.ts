import { NODE_ADDRESS_CONFIG_SHAPE, NODE_COOLDOWN_MAX_MS, NODE_ID_PATTERN } from "@zml/contracts";
import { BUS_CONFIG_SHAPE, requireBusIdentity } from "@zml/bus";
import { parseConfig, SHUTDOWN_CONFIG_SHAPE } from "@zml/runtime";
import { z } from "zod";

const ConfigSchema = z
  .object({
    ...BUS_CONFIG_SHAPE,
    ...SHUTDOWN_CONFIG_SHAPE,
    /** Where nodes may be, checked on every connection after DNS (docs/limits.md). */
    ...NODE_ADDRESS_CONFIG_SHAPE,
    /** Port of /healthz, /readyz and /metrics. */
    DISPATCHER_OPS_PORT: z.coerce.number().int().min(0).max(65535).default(9101),
    DISPATCHER_OPS_HOST: z.string().default("127.0.0.1"),
    /** This replica's name in answers, `accept` frames and liveness beats (default host-pid-random). */
    DISPATCHER_REPLICA_ID: z.string().regex(NODE_ID_PATTERN).optional(),
    /**
     * How often this replica publishes its liveness beat. Intake declares a replica lost
     * after `max(ZML_DISPATCHER_LOSS_MS, 3 × this)` without one.
     */
    DISPATCHER_BEAT_INTERVAL_MS: z.coerce.number().int().min(10).max(60_000).default(250),
    /**
     * A request that has sent no answer frame this long gets an `accept` frame naming this
     * replica (a quicker answer names it on its first frame). Keep it well below intake's
     * `ZML_DISPATCHER_LOSS_MS`, which ends requests nobody accepted within that bound.
     */
    DISPATCHER_ACCEPT_AFTER_MS: z.coerce.number().int().min(1).max(10_000).default(100),
    LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
    /** Per-attempt limits on the call to a node. */
    DISPATCH_CONNECT_TIMEOUT_MS: z.coerce.number().int().positive().default(2_000),
    DISPATCH_HEADERS_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
    /**
     * Longest silence between two body chunks before the stream counts as stalled. Enforced
     * by undici's coarse timers, so up to about half a second early or late (the first-byte
     * limit and the deadline are exact: see attempt-signal.ts).
     */
    DISPATCH_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
    /** Most bytes one node answer may have; a larger one is cut with `response_too_large`. */
    DISPATCH_MAX_ANSWER_BYTES: z.coerce
      .number()
      .int()
      .positive()
      .default(64 * 1024 * 1024),
    /** Minimum connections per node (a node gets at least its max_concurrency). */
    DISPATCH_POOL_CONNECTIONS: z.coerce.number().int().positive().default(16),
    /** How long a node that failed an attempt is skipped by every dispatcher. */
    NODE_COOLDOWN_MS: z.coerce
      .number()
      .int()
      .nonnegative()
      .max(NODE_COOLDOWN_MAX_MS)
      .default(30_000),
    /**
     * JSON file of node credentials by reference (`{"provider-x": "sk-…"}`), for nodes whose
     * spec has `auth.secret_ref`. Read once at start; never logged.
     */
    ZML_NODE_SECRETS_FILE: z.string().optional(),
    /** Batch workers (JetStream jobs) run in every dispatcher unless switched off. */
    BATCH_ENABLED: z.stringbool().default(true),
    /** Deliveries of one job before it is dead-lettered as poison. */
    BATCH_MAX_DELIVERIES: z.coerce.number().int().min(1).default(5),
    /** Redelivery delay after a retryable failure (all attempts of one delivery failed). */
    BATCH_RETRY_DELAY_MS: z.coerce.number().int().nonnegative().default(2_000),
    /**
     * JetStream ack wait. Running and waiting jobs signal progress every third of it, so it
     * only bounds how soon the jobs of a dispatcher that died are handed out again: short,
     * so they run again within seconds.
     */
    BATCH_ACK_WAIT_MS: z.coerce.number().int().min(1_000).default(5_000),
    /**
     * A dispatcher replica whose liveness beats stopped this long no longer holds its batch
     * jobs: a delivery of one of them made meanwhile (JetStream hands a held job out again
     * when a stream leader change lost its progress signals) runs it. While the holder still
     * beats, the new delivery waits for the holder's result instead of running the job twice.
     */
    BATCH_WORKER_LOSS_MS: z.coerce.number().int().min(100).max(600_000).default(3_000),
    /** Longest wait for capacity when the job's policy does not queue on saturation. */
    BATCH_DEFAULT_MAX_QUEUE_MS: z.coerce.number().int().positive().default(3_600_000),
    /** Deadline of one job's execution once it has started. */
    BATCH_JOB_TIMEOUT_MS: z.coerce.number().int().positive().default(600_000),
    /**
     * How long an expired or ended tier-4 session is kept so that its requests get
     * `session_expired` / `session_node_unavailable` rather than `session_not_found`.
     */
    SESSION_RETENTION_MS: z.coerce.number().int().nonnegative().default(3_600_000),
    /** How often each replica removes sessions past their retention. */
    SESSION_SWEEP_INTERVAL_MS: z.coerce.number().int().min(1_000).default(60_000),
  })
  .refine(...requireBusIdentity);

export type DispatcherConfig = z.output<typeof ConfigSchema>;

export function loadConfig(env: Record<string, string | undefined>): DispatcherConfig {
  return parseConfig(ConfigSchema, env);
}
