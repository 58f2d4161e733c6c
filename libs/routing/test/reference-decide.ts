/*
 * The routing decision as it was before the indexed version in src/decide.ts:
 * a scan of every node of the bucket, reading the live table's raw arrays. Kept verbatim
 * as the oracle of test/indexed-decide.test.ts, which asserts that both give the same
 * result for any fleet, live state, policy and request. Do not optimise this file.
 */
import type { NodeApi, Tier } from "@zml/contracts";
import { RoutingError, ROUTING_ERROR_CODES } from "../src/errors.ts";
import { costUsdFrom, responseMsFrom } from "../src/estimate.ts";
import { LIVE_STATUS, type LiveTable } from "../src/live-table.ts";
import { expandPassedOver, pack, R, saturationOf } from "../src/passed-over.ts";
import type { ResolvedPolicy } from "../src/policy.ts";
import { apiBit } from "../src/snapshot.ts";
import type { ModelTierBucket, RoutingSnapshot } from "../src/snapshot.ts";
import type {
  Decision,
  NodeEntry,
  PassedOver,
  RankedCandidate,
  RankingMode,
  Rejection,
  RouteRequest,
} from "../src/types.ts";

/*
 * Scratch space for one decision, one slot per viable node, reused across calls so that
 * the hot path allocates only what it returns. decide() is synchronous and never calls
 * itself, so sharing is safe.
 */
class Scratch {
  size: number;
  /** Per viable slot: node index, family position in visiting order, estimates, keys. */
  idx: Int32Array;
  familyPosition: Float64Array;
  depth: Float64Array;
  /** Service time of one request on the node (ms), see `serviceMs`. */
  service: Float64Array;
  resp: Float64Array;
  quality: Float64Array;
  /** 1 when the node's estimate is over the policy's latency target (README "group"), else 0. */
  overTarget: Float64Array;
  /**
   * The sort keys, compared in this order (README's k1..k4): the latency group folded with
   * the hint or family position; the ranking mode's score; its tie-break; and (quality
   * mode only) the negated health score.
   */
  preferenceKey: Float64Array;
  scoreKey: Float64Array;
  tieBreakKey: Float64Array;
  healthKey: Float64Array;
  inTop: Uint8Array;
  /** Viable slots whose node has no throughput measured yet. */
  unmeasured: Int32Array;
  /** Packed (node, reason) of every filtered node. */
  passed: Int32Array;
  top: Int32Array;
  // Outputs of collect().
  viable = 0;
  passedCount = 0;
  considered = 0;
  /** Nodes of the policy's families left out because they do not serve the request's API. */
  otherApi = 0;
  transient = 0;
  soonestFreeMs = 0;

  constructor(size: number) {
    this.size = size;
    this.idx = new Int32Array(size);
    this.familyPosition = new Float64Array(size);
    this.depth = new Float64Array(size);
    this.service = new Float64Array(size);
    this.resp = new Float64Array(size);
    this.quality = new Float64Array(size);
    this.overTarget = new Float64Array(size);
    this.preferenceKey = new Float64Array(size);
    this.scoreKey = new Float64Array(size);
    this.tieBreakKey = new Float64Array(size);
    this.healthKey = new Float64Array(size);
    this.inTop = new Uint8Array(size);
    this.unmeasured = new Int32Array(size);
    this.passed = new Int32Array(size);
    this.top = new Int32Array(64);
  }
}

let scratch = new Scratch(64);

/** Added to the preference key of nodes over the latency target: above any family position or hint key. */
const GROUP_WEIGHT = 1e9;

/** Maps a uint32 onto [0, 2). */
const TWO_OVER_2_32 = 2 / 4294967296;

/** Bounds that keep every estimate finite whatever a node or a request reports. */
const MIN_TPS = 1e-3;
const MAX_TOKENS = 1e7;

function scratchFor(n: number): Scratch {
  if (n > scratch.size) scratch = new Scratch(Math.max(n, scratch.size * 2));
  return scratch;
}

/** The request-level inputs of one decision, resolved once. */
interface Context {
  snapshot: RoutingSnapshot;
  live: LiveTable;
  bucket: ModelTierBucket;
  chain: readonly string[];
  hint: string | undefined;
  exclude: ReadonlySet<string> | undefined;
  tier: Tier;
  api: NodeApi;
  /** `apiBit(api)`, tested against `snapshot.apiMask`. */
  apiBit: number;
  tokens: number;
  target: number;
  now: number;
  /** Quality scores measured before this are stale; NaN outside quality mode. */
  staleBefore: number;
}

/**
 * Pass 1: walks the policy's families (the hinted one first), records why each unusable
 * node is out, and estimates depth, throughput and response time for the viable ones.
 */
function collect(sc: Scratch, cx: Context): void {
  const { snapshot, live, chain, hint, exclude, tokens, target, now } = cx;
  const opts = snapshot.options;
  const isTier34 = cx.tier >= 3;
  // Hoisted so the per-node loop reads locals, not properties.
  const status = live.status;
  const cooldownUntil = live.cooldownUntil;
  const attestedUntil = live.attestedUntil;
  const polledDepth = live.polledDepth;
  const inFlight = live.inFlight;
  const peerInFlight = live.peerInFlight;
  const inFlightAtPoll = live.inFlightAtPoll;
  const burstAllowance = live.burstAllowance;
  const liveTps = live.tokensPerSecond;
  const capacityTps = live.capacityTps;
  const latencyEwma = live.latencyEwmaMs;
  const maxConcurrency = snapshot.maxConcurrency;
  const apiMask = snapshot.apiMask;
  const wantApi = cx.apiBit;
  const defaultTps = opts.defaultTokensPerSecond;
  const bias = opts.latencyBias;
  const {
    idx,
    familyPosition,
    depth: sDepth,
    service,
    resp: sResp,
    overTarget,
    passed,
    quality,
  } = sc;
  const tokensMs = tokens * 1000;
  const staleBefore = cx.staleBefore;
  const wantQuality = !Number.isNaN(staleBefore);
  let n = 0;
  let p = 0;
  let considered = 0;
  let otherApi = 0;
  let transient = 0;
  let soonest = Number.POSITIVE_INFINITY;
  /** Best throughput among the viable measured nodes, and the idle viable slots never measured. */
  let bestTps = 0;
  let u = 0;
  const unmeasured = sc.unmeasured;

  for (let f = -1; f < chain.length; f++) {
    // Position -1 visits the hinted family first; its own position is then skipped.
    const family = f < 0 ? hint : chain[f];
    if (family === undefined || (f >= 0 && family === hint)) continue;
    const group = cx.bucket.families.get(family);
    if (group === undefined) continue;
    const indices = group.indices;
    const qualityAt = group.qualityAt;
    const qualityScore = group.qualityScore;
    for (let j = 0; j < indices.length; j++) {
      const i = indices[j]!;
      // A node of another API is no candidate at all, like a node of another tier.
      if ((apiMask[i]! & wantApi) === 0) {
        otherApi++;
        continue;
      }
      considered++;
      let reason = -1;
      let depth = 0;
      // Capacity first (what the node sustains when full); the served rate only when no
      // poll has found it generating yet; the default when neither is known.
      const capacity = capacityTps[i]!;
      let tps = capacity > 0 && capacity < Infinity ? capacity : liveTps[i]!;
      const tpsKnown = tps > 0 && tps < Infinity;
      tps = tpsKnown ? Math.max(tps, MIN_TPS) : defaultTps;
      if (exclude !== undefined && exclude.has(snapshot.nodes[i]!.spec.id)) reason = R.excluded;
      else if (status[i] !== LIVE_STATUS.active) {
        reason = status[i] === LIVE_STATUS.unknown ? R.no_state : R.not_active;
      } else if (cooldownUntil[i]! > now) {
        reason = R.cooling_down;
        soonest = Math.min(soonest, cooldownUntil[i]! - now);
      } else if (isTier34 && !(attestedUntil[i]! > now)) reason = R.not_attested;
      else {
        // effectiveDepth(), inlined: the polled depth corrected by every replica's dispatches
        // and completions since, never below what all replicas have in flight (requests in
        // transit when the node was polled are in neither).
        const total = inFlight[i]! + peerInFlight[i]!;
        depth = Math.max(total, polledDepth[i]! + total - inFlightAtPoll[i]!);
        const limit = maxConcurrency[i]!;
        // The burst allowance is this replica's share of the free slots until its peers
        // are heard from again (shared in-flight accounting, docs/capacity.md).
        if (!(depth < limit) || !(burstAllowance[i]! >= 1)) {
          reason = R.at_capacity;
          // Time for the node to get one slot back at its throughput.
          const excess = Number.isFinite(depth) ? Math.max(1, depth - limit + 1) : 1;
          soonest = Math.min(soonest, (excess * tokensMs) / tps);
        }
      }
      if (reason >= 0) {
        if (reason === R.excluded || reason === R.cooling_down || reason === R.at_capacity) {
          transient++;
        }
        passed[p++] = pack(i, reason);
        continue;
      }
      if (tpsKnown) bestTps = Math.max(bestTps, tps);
      else if (depth === 0) unmeasured[u++] = n;
      // serviceMs(tokens, tps), inlined: this division is the loop's most expensive step.
      const ms = tokensMs / tps;
      const resp = responseMsFrom(depth, ms, latencyEwma[i]!, bias);
      idx[n] = i;
      familyPosition[n] = f + 1;
      sDepth[n] = depth;
      service[n] = ms;
      sResp[n] = resp;
      // An idle node never measured (no throughput, no latency) is not judged slow on the
      // default guess: the policy's order decides until observations come in. Otherwise a
      // newly added family would lose to any measured one, whatever the chain says.
      const unmeasuredIdle = depth === 0 && !tpsKnown && Number.isNaN(latencyEwma[i]!);
      overTarget[n] = resp <= target || unmeasuredIdle ? 0 : 1;
      // NaN unless quality routing is on and the score is fresh (a missing one is NaN).
      quality[n] = wantQuality && qualityAt[j]! >= staleBefore ? qualityScore[j]! : Number.NaN;
      n++;
    }
  }
  // Exploration: an idle node never measured is assumed as fast as the best measured one,
  // not the default guess, so it gets traffic and is measured instead of starved. Once it
  // has a queue the default applies again: one request at a time is all it risks.
  if (bestTps > defaultTps) {
    for (let k = 0; k < u; k++) {
      const s = unmeasured[k]!;
      const i = idx[s]!;
      const ms = tokensMs / bestTps;
      service[s] = ms;
      sResp[s] = responseMsFrom(sDepth[s]!, ms, latencyEwma[i]!, bias);
      if (overTarget[s] === 1 && sResp[s] <= target) overTarget[s] = 0;
    }
  }
  sc.viable = n;
  sc.passedCount = p;
  sc.considered = considered;
  sc.otherApi = otherApi;
  sc.transient = transient;
  sc.soonestFreeMs = soonest;
}

/**
 * Pass 2: the ranking keys (see README, "Ranking"). Within the latency target the mode
 * decides; over it, every mode orders by estimated response time. Returns whether any
 * viable node had a fresh quality score (quality mode only).
 */
function score(
  sc: Scratch,
  cx: Context,
  mode: RankingMode,
  random: (() => number) | undefined,
): boolean {
  const { snapshot, live } = cx;
  const n = sc.viable;
  const {
    idx,
    familyPosition,
    service,
    resp,
    overTarget,
    preferenceKey,
    scoreKey,
    tieBreakKey,
    healthKey,
    quality,
  } = sc;
  const hinted = cx.hint !== undefined;
  const jitter = random === undefined ? 0 : snapshot.options.jitter;
  const usdPerHour = snapshot.usdPerHour;
  const fallbackPrice = snapshot.fallbackUsdPerHour;
  // One call to `random` per decision seeds a xorshift32 stream for the per-node jitter:
  // cheaper than a call per node, and still reproducible under a seeded source.
  let bits = jitter === 0 ? 0 : (unit(random!()) * 4294967296) | 0 || 0x9e3779b9;
  let anyFresh = false;
  for (let s = 0; s < n; s++) {
    let shake = 1;
    if (jitter !== 0) {
      bits ^= bits << 13;
      bits ^= bits >>> 17;
      bits ^= bits << 5;
      shake = 1 + jitter * ((bits >>> 0) * TWO_OVER_2_32 - 1);
    }
    // The group (within the latency target or not) folds into preferenceKey to save a comparison.
    const group = overTarget[s]! * GROUP_WEIGHT;
    const hintKey = group + (hinted && familyPosition[s] === 0 ? 0 : 1);
    tieBreakKey[s] = 0;
    healthKey[s] = 0;
    if (!Number.isNaN(quality[s]!)) anyFresh = true;
    if (group !== 0 || mode === "fastest") {
      preferenceKey[s] = hintKey;
      scoreKey[s] = resp[s]! * shake;
      continue;
    }
    if (mode === "latency") {
      preferenceKey[s] = familyPosition[s]!;
      scoreKey[s] = resp[s]! * shake;
      continue;
    }
    const i = idx[s]!;
    const price = usdPerHour[i]!;
    const cost = costUsdFrom(price === price ? price : fallbackPrice, service[s]!);
    preferenceKey[s] = hintKey;
    if (mode === "cost") {
      scoreKey[s] = cost * shake;
      tieBreakKey[s] = resp[s]!;
    } else if (mode === "balanced") {
      scoreKey[s] = cost * resp[s]! * shake;
      tieBreakKey[s] = resp[s]!;
    } else {
      // Quality: fresh scores first, best first; the rest by price per unit of health.
      const health = live.healthScore[i]!;
      const fresh = !Number.isNaN(quality[s]!);
      scoreKey[s] = fresh ? -quality[s]! * shake : Number.POSITIVE_INFINITY;
      tieBreakKey[s] = ((cost * 100) / Math.max(health, 1)) * shake;
      healthKey[s] = -health;
    }
  }
  return anyFresh;
}

/** Whether slot `a` ranks before slot `b`: lexicographic on the four keys, then registration. */
function before(sc: Scratch, a: number, b: number): boolean {
  const preferenceKey = sc.preferenceKey;
  if (preferenceKey[a] !== preferenceKey[b]) return preferenceKey[a]! < preferenceKey[b]!;
  const scoreKey = sc.scoreKey;
  if (scoreKey[a] !== scoreKey[b]) return scoreKey[a]! < scoreKey[b]!;
  const tieBreakKey = sc.tieBreakKey;
  if (tieBreakKey[a] !== tieBreakKey[b]) return tieBreakKey[a]! < tieBreakKey[b]!;
  const healthKey = sc.healthKey;
  if (healthKey[a] !== healthKey[b]) return healthKey[a]! < healthKey[b]!;
  return sc.idx[a]! < sc.idx[b]!;
}

/**
 * Pass 3: the best `k` slots into `sc.top`, by insertion: k is tiny (the attempt budget),
 * so this beats sorting all n. Returns how many were taken.
 */
function selectTop(sc: Scratch, k: number): number {
  const top = sc.top;
  const n = sc.viable;
  let len = 0;
  for (let s = 0; s < n; s++) {
    sc.inTop[s] = 0;
    if (len === k && !before(sc, s, top[k - 1]!)) continue;
    let p = len < k ? len++ : k - 1;
    while (p > 0 && before(sc, s, top[p - 1]!)) {
      top[p] = top[p - 1]!;
      p--;
    }
    top[p] = s;
  }
  for (let r = 0; r < len; r++) sc.inTop[top[r]!] = 1;
  return len;
}

function rankingOf(request: RouteRequest, policy: ResolvedPolicy): RankingMode {
  switch (request.sort) {
    case "quality":
      return "quality";
    case "price":
      return "cost";
    case "latency":
      return "fastest";
    default:
      return policy.costPriority;
  }
}

const REJECTION_CODES = {
  unknown_model: "unknown_model",
  api_not_served: "api_not_served",
  no_node_for_model_tier: "no_node_available",
  no_usable_node: "no_usable_node",
  saturated: "saturated",
} as const;

function reject(
  reason: keyof typeof REJECTION_CODES,
  detail: string,
  passedOver: PassedOver[],
  retryAfterS: number | undefined,
  queueForMs: number,
): Rejection {
  const code = REJECTION_CODES[reason];
  const saturation = saturationOf(passedOver);
  const rejection: Rejection = {
    ok: false,
    reason,
    code,
    detail,
    passedOver,
    saturation,
    queueForMs,
  };
  if (retryAfterS !== undefined) rejection.retryAfterS = retryAfterS;
  return rejection;
}

function rejectNone(sc: Scratch, cx: Context, policy: ResolvedPolicy): Rejection {
  const { snapshot, tier } = cx;
  const model = cx.bucket.model;
  const opts = snapshot.options;
  const passedOver = expandPassedOver(snapshot.nodes, sc.passed.subarray(0, sc.passedCount));
  if (sc.considered === 0 && sc.otherApi > 0) {
    return reject(
      "api_not_served",
      `no node of policy "${policy.name}" families [${cx.chain.join(", ")}] serves the ${cx.api} API for "${model}" at tier ${tier}`,
      passedOver,
      undefined,
      0,
    );
  }
  if (sc.considered === 0) {
    return reject(
      "no_node_for_model_tier",
      `no node of policy "${policy.name}" families [${cx.chain.join(", ")}] serves "${model}" at tier ${tier}`,
      passedOver,
      opts.noNodeRetryAfterS,
      0,
    );
  }
  if (sc.transient > 0) {
    const soonest = sc.soonestFreeMs;
    const retryAfterS = Number.isFinite(soonest)
      ? Math.min(opts.maxRetryAfterS, Math.max(1, Math.ceil(soonest / 1000)))
      : 1;
    return reject(
      "saturated",
      `all ${sc.transient} usable nodes for "${model}" at tier ${tier} are full, cooling down or already failed`,
      passedOver,
      retryAfterS,
      policy.maxQueueMs,
    );
  }
  return reject(
    "no_usable_node",
    `none of the ${sc.considered} nodes for "${model}" at tier ${tier} is active${tier >= 3 ? " and attested" : ""}`,
    passedOver,
    opts.noNodeRetryAfterS,
    0,
  );
}

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
  #packed: readonly number[];
  #passedOver: PassedOver[] | undefined;

  constructor(
    cx: Context,
    policy: string,
    ranking: RankingMode,
    candidates: RankedCandidate[],
    viable: number,
    qualityFresh: boolean | null,
    packed: readonly number[],
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
  }

  get passedOver(): PassedOver[] {
    return (this.#passedOver ??= expandPassedOver(this.#nodes, this.#packed));
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
export function referenceDecide(
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
    apiBit: apiBit(request.api ?? "chat"),
    tokens:
      expected !== undefined && expected > 0 && Number.isFinite(expected)
        ? Math.min(expected, MAX_TOKENS)
        : opts.expectedTokens,
    target: policy.latencyTargetMs,
    now,
    staleBefore: ranking === "quality" ? now - opts.qualityStalenessMs : Number.NaN,
  };
  const sc = scratchFor(bucket.size);
  collect(sc, cx);
  const n = sc.viable;
  if (n === 0) return rejectNone(sc, cx, policy);

  const anyFresh = score(sc, cx, ranking, request.random);
  const len = selectTop(sc, Math.min(opts.maxCandidates, n));

  const candidates = new Array<RankedCandidate>(len);
  for (let r = 0; r < len; r++) {
    const s = sc.top[r]!;
    const entry = snapshot.nodes[sc.idx[s]!]!;
    const quality = sc.quality[s]!;
    candidates[r] = {
      node: entry.spec,
      queueDepth: sc.depth[s]!,
      responseMs: sc.resp[s]!,
      costUsd: entry.usdPerHour === null ? null : costUsdFrom(entry.usdPerHour, sc.service[s]!),
      price: entry.price,
      quality: Number.isNaN(quality) ? null : quality,
      withinLatencyTarget: sc.overTarget[s] === 0,
      // The reference knows no prefixes: the oracle of decisions made without one.
      cachedTokens: 0,
      cachedBlocks: 0,
    };
  }
  const chosenWithin = sc.overTarget[sc.top[0]!] === 0;
  const passedCount = sc.passedCount;
  const passed = sc.passed;
  const packed: number[] = [];
  for (let p = 0; p < passedCount; p++) packed.push(passed[p]!);
  for (let s = 0; s < n; s++) {
    if (sc.inTop[s] === 1) continue;
    const why = chosenWithin && sc.overTarget[s] === 1 ? R.over_latency_target : R.ranked_lower;
    packed.push(pack(sc.idx[s]!, why));
  }
  return new RoutedDecision(
    cx,
    policy.name,
    ranking,
    candidates,
    n,
    ranking === "quality" ? anyFresh : null,
    packed,
  );
}

/** Clamps an injected random value into [0, 1) so a bad source cannot break ranking. */
function unit(value: number): number {
  return value >= 0 && value < 1 ? value : 0.5;
}
