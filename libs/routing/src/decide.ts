// The routing decision: see decide-scratch.ts for how its passes (filter, rank, reject) share
// their working memory, and why.
import { NODE_APIS, type Tier } from "@zml/contracts";
import { RoutingError, ROUTING_ERROR_CODES } from "./errors.ts";
import { costUsdFrom } from "./estimate.ts";
import type { LiveTable } from "./live-table.ts";
import { expandPassedOver } from "./passed-over.ts";
import type { ResolvedPolicy } from "./policy.ts";
import type { RoutingSnapshot } from "./snapshot.ts";
import { scratchFor } from "./decide-scratch.ts";
import type { Context, PrefixContext, Scratch } from "./decide-scratch.ts";
import { PREFIX_BLOCK_CHARS, tokensOfChars } from "./prompt-prefix.ts";
import { filter } from "./filter.ts";
import { dropListed, rank, rankingOf } from "./rank.ts";
import { reject, rejectNone } from "./reject.ts";
import type {
  Decision,
  NodeEntry,
  PassedOver,
  RankedCandidate,
  RankingMode,
  Rejection,
  RouteRequest,
} from "./types.ts";

/** Bound that keeps every estimate finite whatever a request says (see also `MIN_TPS`). */
const MAX_TOKENS = 1e7;

/** A {@link Decision} whose `passedOver` list is built on first read. */
class RoutedDecision implements Decision {
  readonly ok = true;
  readonly model: string;
  readonly tier: Tier;
  readonly policy: string;
  readonly ranking: RankingMode;
  readonly candidates: RankedCandidate[];
  readonly viable: number;
  readonly estimates: { costUsd: number | null; responseMs: number };
  readonly latencyTargetMet: boolean;
  readonly hintApplied: boolean;
  readonly qualityFresh: boolean | null;
  #nodes: readonly NodeEntry[];
  #packed: number[];
  #packedLength: number;
  #overTargetIsRankedLower: boolean;
  #passedOver: PassedOver[] | undefined;

  constructor(
    cx: Context,
    policy: string,
    ranking: RankingMode,
    candidates: RankedCandidate[],
    viable: number,
    qualityFresh: boolean | null,
    packed: number[],
    packedLength: number,
    overTargetIsRankedLower: boolean,
  ) {
    const chosen = candidates[0]!;
    this.model = cx.bucket.model;
    this.tier = cx.tier;
    this.policy = policy;
    this.ranking = ranking;
    this.candidates = candidates;
    this.viable = viable;
    this.estimates = { costUsd: chosen.costUsd, responseMs: chosen.responseMs };
    this.latencyTargetMet = chosen.withinLatencyTarget;
    this.hintApplied = cx.hint !== undefined;
    this.qualityFresh = qualityFresh;
    this.#nodes = cx.snapshot.nodes;
    this.#packed = packed;
    this.#packedLength = packedLength;
    this.#overTargetIsRankedLower = overTargetIsRankedLower;
  }

  get passedOver(): PassedOver[] {
    if (this.#passedOver === undefined) {
      this.#packed.length = this.#packedLength;
      this.#passedOver = expandPassedOver(this.#nodes, this.#packed, this.#overTargetIsRankedLower);
    }
    return this.#passedOver;
  }

  toJSON(): Decision {
    return { ...this, passedOver: this.passedOver };
  }
}

/**
 * Routes one request: filters the nodes serving `request.model` at exactly `request.tier`
 * in the policy's families, ranks the viable ones (see README, "Ranking") and returns the
 * chosen node with its fallbacks, or a rejection saying why none can take the request.
 *
 * Pure apart from calling `request.random`; never throws for any snapshot, live state or
 * request, except {@link RoutingError} `snapshot_mismatch` when `live` belongs to another
 * snapshot. `passedOver` of a decision is built lazily on first read.
 */
export function decide(
  snapshot: RoutingSnapshot,
  live: LiveTable,
  request: RouteRequest,
  policy: ResolvedPolicy,
  now: number,
): Decision | Rejection {
  if (live.snapshot !== snapshot) {
    throw new RoutingError(
      ROUTING_ERROR_CODES.snapshotMismatch,
      "the live table belongs to another snapshot; rebind it first",
    );
  }
  const { model, tier } = request;
  const byTier = snapshot.buckets.get(model);
  if (byTier === undefined && !snapshot.models.has(model)) {
    return reject("unknown_model", `model "${model}" is not served`, [], undefined, 0);
  }
  const opts = snapshot.options;
  const bucket = byTier?.[tier];
  if (bucket === undefined) {
    const tiers = byTier ? [1, 2, 3, 4].filter((t) => byTier[t] !== undefined) : [];
    const where = tiers.length > 0 ? ` (served at tier ${tiers.join(", ")})` : "";
    return reject(
      "no_node_for_model_tier",
      `no node serves "${model}" at tier ${tier}${where}`,
      [],
      opts.noNodeRetryAfterS,
      0,
    );
  }

  const ranking = rankingOf(request, policy);
  const chain = policy.chain;
  const hint = request.acceleratorHint;
  const expected = request.expectedTokens;
  const cx: Context = {
    snapshot,
    live,
    bucket,
    chain,
    hint: hint !== undefined && chain.includes(hint) ? hint : undefined,
    exclude:
      request.exclude !== undefined && request.exclude.size > 0 ? request.exclude : undefined,
    tier,
    api: request.api ?? "chat",
    apiIndex: NODE_APIS.indexOf(request.api ?? "chat"),
    tokens:
      expected !== undefined && expected > 0 && Number.isFinite(expected)
        ? Math.min(expected, MAX_TOKENS)
        : opts.expectedTokens,
    target: policy.latencyTargetMs,
    now,
    staleBefore: ranking === "quality" ? now - opts.qualityStalenessMs : Number.NaN,
    prefix: undefined,
  };
  const sc = scratchFor(bucket.size);
  filter(sc, cx);
  const n = sc.viable;
  if (n === 0) return rejectNone(sc, cx, policy);
  // Tier 4 never: its sessions are pinned, and the gateway never sees their prompts.
  if (policy.prefixAffinity && tier < 4) {
    cx.prefix = prefixContext(live, request, opts.prefixMinChars);
  }
  const decision = ranked(cx, sc, ranking, request, policy);
  if (cx.prefix !== undefined) live.prefixes.clearMatch();
  return decision;
}

/**
 * The prefix the decision routes on: set only when the prompt and what some node holds of
 * it both reach `minChars`; otherwise the decision is exactly the one without a prefix.
 */
function prefixContext(
  live: LiveTable,
  request: RouteRequest,
  minChars: number,
): PrefixContext | undefined {
  const prefix = request.prefix;
  if (prefix === undefined || prefix.chars < minChars) return undefined;
  const match = live.prefixes.match(prefix.digests);
  if (match.best === 0 || match.best * PREFIX_BLOCK_CHARS < minChars) {
    live.prefixes.clearMatch();
    return undefined;
  }
  return { promptTokens: tokensOfChars(prefix.chars), blocks: match.blocks };
}

/** Pass 2 and the result, once some node is viable. */
function ranked(
  cx: Context,
  sc: Scratch,
  ranking: RankingMode,
  request: RouteRequest,
  policy: ResolvedPolicy,
): Decision {
  const { snapshot } = cx;
  const opts = snapshot.options;
  const n = sc.viable;

  // The passed-over codes, one allocation: the filtered nodes, then every viable one, from
  // which the listed candidates are then dropped.
  const passedCount = sc.passedCount;
  // A plain array: a typed one this large is allocated outside the heap, which costs more.
  const packed = new Array<number>(passedCount + n);
  const passed = sc.passed;
  for (let p = 0; p < passedCount; p++) packed[p] = passed[p]!;
  const len = rank(
    sc,
    cx,
    ranking,
    request.random,
    Math.min(opts.maxCandidates, n),
    packed,
    passedCount,
  );
  const packedLength = dropListed(sc, len, packed, passedCount);

  const candidates = new Array<RankedCandidate>(len);
  for (let r = 0; r < len; r++) {
    const s = sc.top[r]!;
    const entry = snapshot.nodes[sc.idx[s]!]!;
    const quality = Number.isNaN(cx.staleBefore) ? Number.NaN : sc.quality[s]!;
    const cachedBlocks = cx.prefix === undefined ? 0 : cx.prefix.blocks[entry.index]!;
    candidates[r] = {
      node: entry.spec,
      queueDepth: sc.depth[s]!,
      responseMs: sc.resp[s]!,
      costUsd: entry.usdPerHour === null ? null : costUsdFrom(entry.usdPerHour, sc.service[s]!),
      price: entry.price,
      quality: Number.isNaN(quality) ? null : quality,
      withinLatencyTarget: sc.overTarget[s] === 0,
      cachedTokens: tokensOfChars(cachedBlocks * PREFIX_BLOCK_CHARS),
      cachedBlocks,
    };
  }
  // "Over the latency target" explains a loss only when the chosen node is within it.
  const chosenWithin = sc.overTarget[sc.top[0]!] === 0;
  return new RoutedDecision(
    cx,
    policy.name,
    ranking,
    candidates,
    n,
    ranking === "quality" ? sc.anyFresh : null,
    packed,
    packedLength,
    !chosenWithin,
  );
}
