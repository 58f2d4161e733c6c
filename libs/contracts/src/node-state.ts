import { z } from "zod";
import { NODE_ID_PATTERN } from "./subjects.ts";

export const NODE_STATUSES = ["Active", "Degraded", "Isolated"] as const;
export const NodeStatusSchema = z.enum(NODE_STATUSES);
export type NodeStatus = z.infer<typeof NodeStatusSchema>;

/** What the health aggregator knows about one node; broadcast and kept in KV. */
export const NodeStateSchema = z.object({
  type: z.literal("node.state.v1"),
  node_id: z.string().regex(NODE_ID_PATTERN),
  status: NodeStatusSchema,
  probe_pending: z.boolean(),
  /** Requests running plus waiting on the node, from its own metrics. */
  queue_depth: z.number().int().nonnegative(),
  running: z.number().int().nonnegative(),
  waiting: z.number().int().nonnegative(),
  /** KV-cache usage 0–1 where the framework reports it. */
  kv_cache_usage: z.number().min(0).max(1).nullable(),
  health_score: z.number().min(0).max(100),
  consecutive_failures: z.number().int().nonnegative(),
  /** Why the last probe failed, when it did. */
  last_error: z.string().nullable(),
  /** Epoch ms of the last probe and of the last successful one. */
  checked_at: z.number().int(),
  last_ok_at: z.number().int().nullable(),
  /** Free accelerator memory in GiB, where the node reports it. */
  free_memory_gib: z.number().nonnegative().nullable().default(null),
  /** Epoch ms of the last successful inference the dispatchers observed. */
  last_inference_at: z.number().int().nullable().default(null),
  /** Generation throughput history (EWMA), for ranking by queue depth ÷ tokens per second. */
  tokens_per_second: z.number().nonnegative().nullable().default(null),
  /**
   * One request's generation speed (EWMA), from the node's time-per-output-token histogram;
   * routing's capacity is this × max_concurrency. Independent of how busy the node is.
   */
  request_tokens_per_second: z.number().nonnegative().nullable().default(null),
  /** Observed latency and time to first token (EWMA) from dispatch outcomes. */
  latency_ewma_ms: z.number().nonnegative().nullable().default(null),
  ttft_ewma_ms: z.number().nonnegative().nullable().default(null),
  /** Identity the node reports; a new one means a new instance with no inherited history. */
  instance_id: z.string().nullable().default(null),
  /**
   * Share of prompt tokens the node served from its prefix cache over the last poll interval
   * (0–1): vLLM `prefix_cache_hits ÷ prefix_cache_queries`, llama.cpp
   * `prompt_tokens_cached ÷ prompt_tokens`, SGLang `cache_hit_rate`. `null` when the node
   * reports no such series or saw no prompt in the interval. Cache-aware routing compares it
   * with the hits it expected, to correct its index of what the node holds.
   */
  prefix_cache_hit_rate: z.number().min(0).max(1).nullable().default(null),
  /**
   * Prompt tokens the node prefills per second when it is not served from cache (EWMA), from
   * its prompt-token counters and prefill-time histogram. `null` until measured.
   */
  prefill_tokens_per_second: z.number().positive().nullable().default(null),
  /**
   * Tokens the node's KV cache holds in all (vLLM `cache_config_info`: `num_gpu_blocks ×
   * block_size`; llama.cpp: the context of all its slots). `null` when not reported.
   */
  kv_cache_capacity_tokens: z.number().int().positive().nullable().default(null),
  /**
   * The model ids the node's engine says it serves (`GET /v1/models` of vLLM, llama.cpp and
   * SGLang, TGI's `GET /info`). `null` when the engine did not say.
   */
  served_models: z.array(z.string().max(512)).max(1_000).nullable().default(null),
  /**
   * Models the node is registered for that its engine refuses because it does not serve them
   * (vLLM answers 404): routing does not send the node these models until this changes.
   */
  unserved_models: z.array(z.string().max(512)).max(1_000).default([]),
});
export type NodeState = z.infer<typeof NodeStateSchema>;

export const OBSERVATION_OUTCOMES = ["ok", "http_error", "network_error", "timeout"] as const;

/** One dispatch attempt's outcome, published by the dispatcher for the aggregator. */
export const NodeObservationSchema = z.object({
  type: z.literal("node.observation.v1"),
  node_id: z.string().regex(NODE_ID_PATTERN),
  decision_id: z.string(),
  outcome: z.enum(OBSERVATION_OUTCOMES),
  /** Upstream HTTP status, when there was one. */
  status: z.number().int().nullable(),
  latency_ms: z.number().nonnegative(),
  ttft_ms: z.number().nonnegative().nullable(),
  at: z.number().int(),
});
export type NodeObservation = z.infer<typeof NodeObservationSchema>;

/**
 * Observations of one node gathered by a dispatcher over a short window (≤ 100 ms) and
 * sent as one message, so the aggregator wakes once per window rather than per request.
 */
export const NodeObservationBatchSchema = z.object({
  type: z.literal("node.observation.batch.v1"),
  node_id: z.string().regex(NODE_ID_PATTERN),
  observations: z.array(NodeObservationSchema).min(1).max(1_000),
});
export type NodeObservationBatch = z.infer<typeof NodeObservationBatchSchema>;

/**
 * The longest cooldown any message can impose. A cooldown is a claim one dispatcher makes to
 * all others; bounded, even a forged or buggy flood of them heals itself within this time.
 */
export const NODE_COOLDOWN_MAX_MS = 10 * 60_000;

/**
 * A node taken out of rotation for a while after a failure, shared by all dispatchers. v2
 * carries a duration (receivers apply it from their own clock, so no clock skew and no
 * far-future `until`) capped at {@link NODE_COOLDOWN_MAX_MS}, and who sent it.
 */
export const NodeCooldownSchema = z.object({
  type: z.literal("node.cooldown.v2"),
  node_id: z.string().regex(NODE_ID_PATTERN),
  /** Milliseconds from receipt during which no dispatcher sends the node traffic. */
  duration_ms: z.number().int().nonnegative().max(NODE_COOLDOWN_MAX_MS),
  /** e.g. `http_503`, `network_error`, `retry_after`. */
  reason: z.string().max(64),
  /** The dispatcher replica that saw the failure (`dispatcher@<host>:<pid>`). */
  origin: z.string().min(1).max(128),
});
export type NodeCooldown = z.infer<typeof NodeCooldownSchema>;
