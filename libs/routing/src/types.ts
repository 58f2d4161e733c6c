import type { ErrorCode, NodeApi, NodeSpec, SaturationDetail, Tier } from "@zml/contracts";
import type { CostEntry } from "./schemas.ts";
import type { NodePrice } from "./price.ts";
import type { PromptPrefix } from "./prompt-prefix.ts";

/** How candidates are ordered: the policy's `cost_priority`, or the client's `provider.sort`. */
export type RankingMode = "latency" | "cost" | "balanced" | "quality" | "fastest";

/** The `provider.sort` values a client may send. */
export type ProviderSort = "quality" | "price" | "latency";

/** The routing fields of one request, as intake extracted them. */
export interface RouteRequest {
  model: string;
  /** The request's trust tier; only nodes of exactly this tier are considered. */
  tier: Tier;
  /**
   * The API the request calls (`chat` when omitted); only nodes whose `apis` include it are
   * considered, exactly as nodes of other tiers are not.
   */
  api?: NodeApi | undefined;
  /** Preferred accelerator family; ignored when the policy's chain does not contain it. */
  acceleratorHint?: string | undefined;
  /** `provider.sort`: overrides the policy's ranking (`price` ≙ `cost`). */
  sort?: ProviderSort | undefined;
  /** Output tokens the request is expected to produce (e.g. its `max_tokens`). */
  expectedTokens?: number | undefined;
  /** Nodes already tried and failed during this request. */
  exclude?: ReadonlySet<string> | undefined;
  /**
   * The block digests of the request's prompt (intake computes them once,
   * `promptPrefixOf`): with the policy's `prefix_affinity`, nodes expected to hold the prefix
   * in their KV cache are estimated without its prefill. Never set for tier 4.
   */
  prefix?: PromptPrefix | undefined;
  /**
   * Source of randomness in [0, 1) for tie-breaking among near-equal candidates, called
   * once per decision. Without it the decision is fully deterministic (no jitter).
   */
  random?: (() => number) | undefined;
}

/** Why a node of the policy's families was not chosen. */
export type PassOverReason =
  /** The node failed earlier in this request. */
  | "excluded"
  /** The health aggregator has not reported on the node yet. */
  | "no_state"
  /** `Degraded`, `Isolated`, or `Active` with a probe still pending. */
  | "not_active"
  | "cooling_down"
  /** Tier 3/4 node without a valid attestation at `now`. */
  | "not_attested"
  | "at_capacity"
  /** Viable, but its estimated response time exceeds the policy's latency target. */
  | "over_latency_target"
  /** Viable, but other candidates ranked higher and the candidate list is full. */
  | "ranked_lower";

export interface PassedOver {
  nodeId: string;
  family: string;
  reason: PassOverReason;
}

/** A viable node with the estimates it was ranked by. */
export interface RankedCandidate {
  node: NodeSpec;
  /** Effective queue depth used for the estimate (polled depth + dispatched since). */
  queueDepth: number;
  /** Estimated response time (see README, "Response time"). */
  responseMs: number;
  /** Estimated cost of this request; `null` when the node has no usable price. */
  costUsd: number | null;
  /** The price the estimate used: its source, when it was confirmed, whether it aged out. */
  price: NodePrice;
  /** Fresh quality score when quality routing is on and one exists, else `null`. */
  quality: number | null;
  withinLatencyTarget: boolean;
  /**
   * Prompt tokens the node is expected to hold in its prefix cache (whole blocks of the
   * prompt's prefix); 0 when prefix affinity did not apply to the decision.
   */
  cachedTokens: number;
  /** Leading prefix blocks behind `cachedTokens`, for the hit-rate check. */
  cachedBlocks: number;
}

/** A routing decision: the chosen node first, then its ranked fallbacks. */
export interface Decision {
  ok: true;
  model: string;
  tier: Tier;
  policy: string;
  ranking: RankingMode;
  /** Never empty; at most `maxCandidates` long. */
  candidates: RankedCandidate[];
  /** Number of viable nodes, listed or not. */
  viable: number;
  /** Every other node of the policy's families, with why it was not chosen. */
  readonly passedOver: PassedOver[];
  /** Estimates for the chosen node (`candidates[0]`). */
  estimates: { costUsd: number | null; responseMs: number };
  /** False when every viable node is over the latency target and the fastest was taken. */
  latencyTargetMet: boolean;
  /** Whether the request's accelerator hint named a family of the policy's chain. */
  hintApplied: boolean;
  /** Quality routing only: whether any candidate had a fresh score; `null` otherwise. */
  qualityFresh: boolean | null;
}

export type RejectionReason =
  | "unknown_model"
  | "unknown_policy"
  /** Nodes serve the model at this tier, but none of them offers the request's API. */
  | "api_not_served"
  /** No node serves the model at this tier in the policy's families,  */
  | "no_node_for_model_tier"
  /** Nodes serve it, but none is active (and, for tiers 3–4, attested). */
  | "no_usable_node"
  /** Nodes exist but every one is full, cooling down or already failed in this request. */
  | "saturated";

/** Why no node can take the request, with the API error code it maps to. */
export interface Rejection {
  ok: false;
  reason: RejectionReason;
  code: ErrorCode;
  /** Seconds to send as `Retry-After`; set for the 503 reasons only. */
  retryAfterS?: number;
  detail: string;
  readonly passedOver: PassedOver[];
  /** How many nodes were considered and why each was out (all zero for `unknown_*`). */
  saturation: SaturationDetail;
  /** How long the dispatcher may queue the request (policy `queue_on_saturation`); 0 = fail fast. */
  queueForMs: number;
}

/** One registered node with everything about it that does not change between polls. */
export interface NodeEntry {
  /** Dense index into the {@link LiveTable} arrays; registration order. */
  readonly index: number;
  readonly spec: NodeSpec;
  /** Node-hour price routing uses (`price.usdPerHour`); `null` without a usable price. */
  readonly usdPerHour: number | null;
  readonly cost: CostEntry | null;
  /** Where `usdPerHour` comes from, at the snapshot's `builtAt`. */
  readonly price: NodePrice;
}
