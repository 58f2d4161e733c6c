import { z } from "zod";
import { NODE_ID_PATTERN } from "./subjects.ts";

/**
 * Fleet configuration: what operators declare and apply, stored in NATS KV one document
 * per key and watched into memory by every service.
 */

const Id = z.string().regex(NODE_ID_PATTERN, "letters, digits, '-' and '_', at most 64");
export const TierSchema = z.number().int().min(1).max(4);
export type Tier = z.infer<typeof TierSchema>;

/**
 * The serving engine behind a node, which decides how its health and metrics are read:
 * `vllm`, `tgi`, `llamacpp` (llama.cpp's `llama-server`), `sglang`, `openai` (a provider:
 * health only, no metrics) or `custom` (the JSON health document).
 */
export const FRAMEWORKS = ["vllm", "tgi", "llamacpp", "sglang", "openai", "custom"] as const;
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

/**
 * Where a node runs when it is a cloud instance: the cloud account (a `cloud_accounts` id),
 * region, instance type and GPUs per instance are what the cost feed needs to look up its
 * spot price. `fallback_usd_per_gpu_hour` is the operator's on-demand (or agreed) rate: what
 * routing uses while no fresh spot price exists.
 */
export const NodeCloudPlacementSchema = z.strictObject({
  account: Id,
  region: z.string().regex(/^[a-z0-9-]{2,64}$/, "a provider region such as us-east-1"),
  /** AWS availability zone (e.g. `us-east-1a`); without it the region's highest spot price counts. */
  zone: z
    .string()
    .regex(/^[a-z0-9-]{2,64}$/)
    .optional(),
  /** EC2 instance type, Azure VM size (`armSkuName`) or GCP machine type. */
  instance_type: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,128}$/, "an instance type such as p5.48xlarge"),
  /** GCP only: the GPU's name in the billing catalog, e.g. `Nvidia H100 80GB`. */
  gpu_type: z.string().min(1).max(128).optional(),
  gpus_per_instance: z.number().int().positive().max(64),
  fallback_usd_per_gpu_hour: z.number().positive().max(10_000).optional(),
});
export type NodeCloudPlacement = z.infer<typeof NodeCloudPlacementSchema>;

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
    /** Set when the node is a cloud instance whose price the cost feed follows. */
    cloud: NodeCloudPlacementSchema.optional(),
    /**
     * Tokens the node's KV cache holds, for prefix-affinity routing, when its engine does not
     * report it (vLLM and llama.cpp do).
     */
    kv_cache_tokens: z.number().int().positive().max(1e10).optional(),
    /** Prompt tokens the node prefills per second, assumed until its metrics measure it. */
    prefill_tokens_per_second: z.number().positive().max(1e9).optional(),
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
   * Longest wait for a node's first byte per attempt (for a stream its first event, for a
   * plain answer its body: headers alone are no answer), for streamed and plain requests
   * alike, overriding the limit derived from `latency_target_ms` and, for a plain answer,
   * the response time expected (docs/capacity.md, "Time to first byte").
   */
  first_byte_timeout_ms: z.number().int().min(100).max(600_000).optional(),
  /**
   * Whether ranking counts what each node is expected to hold of the request's prompt prefix
   * in its KV cache (cache-aware routing, docs/capacity.md "Prefix affinity"). On when absent.
   */
  prefix_affinity: z.boolean().optional(),
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

export const CLOUD_PROVIDERS = ["aws", "azure", "gcp"] as const;
export const CloudProviderSchema = z.enum(CLOUD_PROVIDERS);
export type CloudProvider = z.infer<typeof CloudProviderSchema>;

/**
 * Where the cost feed gets a cloud account's credentials. Only the reference is stored (a
 * profile name, a role ARN, a file path on the feed's host); the secret itself never enters
 * KV, the API or a log. `none` is for public price lists (Azure's Retail Prices API).
 */
export const CloudCredentialsSchema = z.discriminatedUnion("kind", [
  /** AWS: a named profile of the shared config/credentials files on the feed's host. */
  z.strictObject({
    kind: z.literal("profile"),
    profile: z.string().regex(/^[A-Za-z0-9_.+=@-]{1,128}$/),
  }),
  /** AWS: a role the feed's own identity assumes (STS AssumeRole). */
  z.strictObject({
    kind: z.literal("role"),
    role_arn: z
      .string()
      .regex(/^arn:aws[a-z-]*:iam::\d{12}:role\/[\w+=,.@/-]{1,512}$/, "an IAM role ARN"),
    external_id: z.string().min(2).max(1224).optional(),
  }),
  /**
   * A JSON file on the feed's host: AWS `{ access_key_id, secret_access_key, session_token? }`,
   * GCP `{ api_key }` or `{ access_token }`.
   */
  z.strictObject({
    kind: z.literal("secret_file"),
    path: z.string().regex(/^\//, "an absolute path"),
  }),
  z.strictObject({ kind: z.literal("none") }),
]);
export type CloudCredentials = z.infer<typeof CloudCredentialsSchema>;

/**
 * A registered cloud account: the cost feed refreshes the spot prices of its nodes every
 * `refresh_interval_s` (jittered), and routing trusts a price for `max_price_age_s` after it
 * was fetched, then falls back to the node's configured rate.
 */
export const CloudAccountSpecSchema = z
  .strictObject({
    id: Id,
    provider: CloudProviderSchema,
    /** The provider's own id: AWS account number, Azure subscription, GCP billing account. */
    account_id: z.string().min(1).max(128),
    regions: z.array(z.string().regex(/^[a-z0-9-]{2,64}$/)).min(1),
    credentials: CloudCredentialsSchema,
    refresh_interval_s: z.number().int().min(5).max(86_400).default(300),
    max_price_age_s: z
      .number()
      .int()
      .min(5)
      .max(7 * 86_400)
      .default(900),
    /** AWS: the spot product description, e.g. `Linux/UNIX`. */
    product_description: z.string().min(1).max(64).default("Linux/UNIX"),
    /** GCP: the Compute Engine service id in the billing catalog. */
    billing_service: z
      .string()
      .regex(/^[A-Z0-9-]{4,32}$/)
      .default("6F81-5844-456A"),
  })
  .superRefine((a, ctx) => {
    const kind = a.credentials.kind;
    const fits =
      a.provider === "aws"
        ? kind !== "none"
        : a.provider === "gcp"
          ? kind === "secret_file"
          : kind === "none";
    if (!fits) {
      ctx.addIssue({
        code: "custom",
        path: ["credentials", "kind"],
        message:
          a.provider === "aws"
            ? "aws needs a profile, role or secret_file"
            : a.provider === "gcp"
              ? "gcp needs a secret_file holding an api_key or access_token"
              : "azure's retail prices are public: use kind none",
      });
    }
    if (a.max_price_age_s < a.refresh_interval_s) {
      ctx.addIssue({
        code: "custom",
        path: ["max_price_age_s"],
        message:
          "must be at least refresh_interval_s, or every price ages out before the next refresh",
      });
    }
  });
export type CloudAccountSpec = z.infer<typeof CloudAccountSpecSchema>;

/** A whole fleet document as applied with `zml apply -f`. */
export const FleetDocumentSchema = z.strictObject({
  apiVersion: z.literal("zml/v1"),
  nodes: z.array(NodeSpecSchema).default([]),
  models: z.array(ModelSpecSchema).default([]),
  policies: z.array(PolicySpecSchema).default([]),
  accounts: z.array(AccountSpecSchema).default([]),
  cloud_accounts: z.array(CloudAccountSpecSchema).default([]),
});
export type FleetDocument = z.infer<typeof FleetDocumentSchema>;
