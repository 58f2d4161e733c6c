import { z } from "zod";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Fleet configuration: what operators declare and apply, stored in NATS KV one document
 * per key and watched into memory by every service.
 */

const Id = z.string().regex(NODE_ID_PATTERN, "letters, digits, '-' and '_', at most 64");
export const TierSchema = z.number().int().min(1).max(4);
export type Tier = z.infer<typeof TierSchema>;

export const FRAMEWORKS = ["vllm", "tgi", "openai", "custom"] as const;
export const FrameworkSchema = z.enum(FRAMEWORKS);
export type Framework = z.infer<typeof FrameworkSchema>;

/**
 * The OpenAI-compatible APIs a node can serve: `chat` (`/v1/chat/completions`),
 * `completions` (`/v1/completions`), `responses` (`/v1/responses`) and `embeddings`
 * (`/v1/embeddings`). A request goes only to a node that declares its API.
 */
export const NODE_APIS = ["chat", "completions", "responses", "embeddings"] as const;
export const NodeApiSchema = z.enum(NODE_APIS);
export type NodeApi = z.infer<typeof NodeApiSchema>;
/** What a node serves when its spec names no `apis`: what every vLLM and TGI server offers. */
export const DEFAULT_NODE_APIS: readonly NodeApi[] = ["chat", "completions"];

export const COST_PRIORITIES = ["cost", "balanced", "latency"] as const;
export const CostPrioritySchema = z.enum(COST_PRIORITIES);
export type CostPriority = z.infer<typeof CostPrioritySchema>;

export const NODE_PROTOCOLS = ["http1", "h2", "h2c"] as const;

export const NodeSpecSchema = z
  .strictObject({
    id: Id,
    /** Base URL of the serving framework, e.g. `http://10.0.0.5:8000`. */
    endpoint: z.url({ protocol: /^https?$/ }).refine(
      // Runs even when the URL check above failed: a string that is no URL passes here.
      (u) => !URL.canParse(u) || (new URL(u).username === "" && new URL(u).password === ""),
      "must not carry credentials: put them in the secrets file and name them in auth.secret_ref",
    ),
    framework: FrameworkSchema,
    /** Accelerator family, e.g. `H100`, `MI300X`. */
    accelerator_family: z.string().min(1).max(64),
    tier: TierSchema,
    /** Model ids this node serves. */
    models: z.array(z.string().min(1)).min(1),
    /** The APIs the node serves; a request of another API never reaches it. */
    apis: z
      .array(NodeApiSchema)
      .min(1)
      .default(() => [...DEFAULT_NODE_APIS]),
    /** In-flight requests above which the node counts as full. */
    max_concurrency: z.number().int().positive().default(16),
    health_path: z.string().regex(/^\//, "a path starting with '/'").default("/health"),
    metrics_path: z.string().regex(/^\//, "a path starting with '/'").default("/metrics"),
    /**
     * Credential the dispatcher adds when calling the node (tier 1/2 providers). Only a
     * reference is stored here: the secret itself comes from the dispatcher's secrets file
     * and is never returned by the API or logged.
     */
    auth: z
      .strictObject({
        header: z
          .string()
          .regex(/^[A-Za-z0-9-]{1,64}$/)
          .default("authorization"),
        scheme: z.string().max(32).default("Bearer"),
        secret_ref: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/),
      })
      .optional(),
    /**
     * How the dispatcher speaks to the node: `http1` (absent means this; vLLM's default
     * server), `h2` (HTTP/2 negotiated by ALPN over TLS: an `https` endpoint) or `h2c` (HTTP/2
     * without TLS, prior knowledge: an `http` endpoint).
     */
    protocol: z.enum(NODE_PROTOCOLS).optional(),
    /** Registration order tie-breaker; set by `apply` from the order in the fleet file. */
    registered_at: z.number().int().nonnegative().default(0),
  })
  .superRefine((node, ctx) => {
    const scheme = URL.canParse(node.endpoint) ? new URL(node.endpoint).protocol : undefined;
    if (node.protocol === "h2" && scheme === "http:") {
      ctx.addIssue({
        code: "custom",
        path: ["protocol"],
        message: "h2 is negotiated over TLS: use an https endpoint, or h2c for plain http",
      });
    }
    if (node.protocol === "h2c" && scheme === "https:") {
      ctx.addIssue({
        code: "custom",
        path: ["protocol"],
        message: "h2c is HTTP/2 without TLS: use an http endpoint, or h2 for https",
      });
    }
  });
export type NodeSpec = z.infer<typeof NodeSpecSchema>;

/** Values of {@link NodeSpec.protocol}. */
export type NodeProtocol = (typeof NODE_PROTOCOLS)[number];

/**
 * Model ids are KV keys: letters, digits, `-`, `_`, `=`, `/` and inner dots (so
 * `meta-llama/Llama-3.1-8B-Instruct` works; `llama3:8b` does not).
 */
export const MODEL_ID_PATTERN = /^[-/=\w]+(\.[-/=\w]+)*$/;

export const ModelSpecSchema = z.strictObject({
  id: z
    .string()
    .max(256)
    .regex(MODEL_ID_PATTERN, "letters, digits, '-', '_', '=', '/' and inner '.'"),
  default_policy: z.string().min(1).optional(),
  /**
   * Output tokens routing expects from a request of this model that sends no `max_tokens`
   * (else the routing core's default, 256).
   */
  default_max_tokens: z.number().int().positive().max(10_000_000).optional(),
});
export type ModelSpec = z.infer<typeof ModelSpecSchema>;

/** The routing policy, accepted verbatim in the walkthrough's YAML shape. */
export const PolicySpecSchema = z.strictObject({
  name: Id,
  accelerator_preference: z
    .array(z.strictObject({ family: z.string().min(1), priority: z.number().int() }))
    .min(1),
  latency_target_ms: z.number().int().positive(),
  cost_priority: CostPrioritySchema,
  queue_on_saturation: z.boolean().default(false),
  max_queue_ms: z.number().int().nonnegative().default(0),
  /**
   * Longest wait for a node's first byte (its response headers; for a stream, its first
   * event, since a stream's headers come before any token) per attempt, overriding the
   * limit derived from `latency_target_ms` (docs/capacity.md, "Time to first byte"). Also
   * applies to requests that are not streamed, which keep the dispatcher's
   * `DISPATCH_HEADERS_TIMEOUT_MS` otherwise.
   */
  first_byte_timeout_ms: z.number().int().min(100).max(600_000).optional(),
});
export type PolicySpec = z.infer<typeof PolicySpecSchema>;

const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "lowercase hex SHA-256");

/**
 * Per-account request rate: a token bucket holding `burst` requests (default
 * `requests_per_minute`), refilled at `requests_per_minute`. Enforced per intake replica.
 */
export const RateLimitSchema = z.strictObject({
  requests_per_minute: z.number().int().positive().max(1_000_000),
  burst: z.number().int().positive().max(1_000_000).optional(),
});
export type RateLimit = z.infer<typeof RateLimitSchema>;

export const AccountSpecSchema = z.strictObject({
  id: Id,
  /** SHA-256 (hex) of each API key; keys themselves are never stored. */
  api_key_sha256: z.array(Sha256Hex).default([]),
  allowed_tiers: z.array(TierSchema).min(1).default([1]),
  default_policy: z.string().min(1).optional(),
  rate_limit: RateLimitSchema.optional(),
});
export type AccountSpec = z.infer<typeof AccountSpecSchema>;

/** A whole fleet document as applied with `zml apply -f`. */
export const FleetDocumentSchema = z.strictObject({
  apiVersion: z.literal("zml/v1"),
  nodes: z.array(NodeSpecSchema).default([]),
  models: z.array(ModelSpecSchema).default([]),
  policies: z.array(PolicySpecSchema).default([]),
  accounts: z.array(AccountSpecSchema).default([]),
});
export type FleetDocument = z.infer<typeof FleetDocumentSchema>;
