import { NODE_APIS, type NodeApi, type Tier } from "@zml/contracts";
import { RoutingError, ROUTING_ERROR_CODES } from "./errors.ts";
import { costUsdFrom, responseMsFrom } from "./estimate.ts";
import { GATE, type LiveTable } from "./live-table.ts";
import { expandPassedOver, pack, R, saturationOf } from "./passed-over.ts";
import type { ResolvedPolicy } from "./policy.ts";
import type { ModelTierBucket, RoutingSnapshot } from "./snapshot.ts";
import type {
  Decision,
  NodeEntry,
  PassedOver,
  RankedCandidate,
  RankingMode,
  Rejection,
  RouteRequest,
} from "./types.ts";

/*
 * Scratch space for one decision, one slot per viable node, reused across calls so that
 * the hot path allocates only what it returns. decide() is synchronous and never calls
 * itself, so sharing is safe.
 */
class Scratch {
  size: number;
  /**
   * Per viable slot: node index and (quality mode only) fresh quality score (written by
   * `filter` for every slot); estimates, `overTarget` and keys (written by `rank` only for
   * the slots that entered the top, the only ones read afterwards).
   */
  idx: Int32Array;
  /**
   * The slots in runs of one family each, in visiting order: run `r` ends before slot
   * `runEnd[r]` and its family has position `runPosition[r]` (0 for the hinted family,
   * else 1 + its index in the policy's chain). Written by `filter`.
   */
  runEnd = new Int32Array(8);
  runPosition = new Int32Array(8);
  runs = 0;
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
  /** The listed slots in ascending order, for {@link dropListed}. */
  listed: Int32Array;
  /** Packed (node, reason) of every filtered node. */
  passed: Int32Array;
  top: Int32Array;
  // Outputs of filter().
  viable = 0;
  passedCount = 0;
  considered = 0;
  /** Nodes of the policy's families left out because they do not serve the request's API. */
  otherApi = 0;
  transient = 0;
  soonestFreeMs = 0;
  /** Best throughput among the viable measured nodes (filter). */
  bestTps = 0;
  /** Whether any viable node had a fresh quality score (rank). */
  anyFresh = false;

  constructor(size: number) {
    this.size = size;
    this.idx = new Int32Array(size);
    this.depth = new Float64Array(size);
    this.service = new Float64Array(size);
    this.resp = new Float64Array(size);
    this.quality = new Float64Array(size);
    this.overTarget = new Float64Array(size);
    this.preferenceKey = new Float64Array(size);
    this.scoreKey = new Float64Array(size);
    this.tieBreakKey = new Float64Array(size);
    this.healthKey = new Float64Array(size);
    this.listed = new Int32Array(64);
    this.passed = new Int32Array(size);
    this.top = new Int32Array(64);
  }
}

let scratch = new Scratch(64);

/** Added to the preference key of nodes over the latency target: above any family position or hint key. */
const GROUP_WEIGHT = 1e9;

/** Maps a uint32 onto [0, 2). */
const TWO_OVER_2_32 = 2 / 4294967296;

/** Bound that keeps every estimate finite whatever a request says (see also `MIN_TPS`). */
const MAX_TOKENS = 1e7;

/** Per node index, 1 while the node is excluded by the decision in progress; else 0. */
let excludedMarks = new Uint8Array(64);

function markExcluded(
  snapshot: RoutingSnapshot,
  exclude: ReadonlySet<string> | undefined,
): Uint8Array | undefined {
  if (exclude === undefined) return undefined;
  if (excludedMarks.length < snapshot.nodes.length) {
    excludedMarks = new Uint8Array(Math.max(snapshot.nodes.length, excludedMarks.length * 2));
  }
  for (const id of exclude) {
    const i = snapshot.nodeIndex.get(id);
    if (i !== undefined) excludedMarks[i] = 1;
  }
  return excludedMarks;
}

function unmarkExcluded(
  snapshot: RoutingSnapshot,
  exclude: ReadonlySet<string>,
  marks: Uint8Array,
): void {
  for (const id of exclude) {
    const i = snapshot.nodeIndex.get(id);
    if (i !== undefined) marks[i] = 0;
  }
}

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
  /** Position of `api` in `NODE_APIS`: which `ApiSlice` (snapshot.ts) of each family to walk. */
  apiIndex: number;
  tokens: number;
  target: number;
  now: number;
  /** Quality scores measured before this are stale; NaN outside quality mode. */
  staleBefore: number;
}

/**
 * Pass 1, the filter: walks the policy's families (the hinted one first), narrowed to the
 * nodes serving the request's API (`ApiSlice` in snapshot.ts), and records why each unusable
 * node is out. What does not depend on the request (effective depth, usable or full,
 * throughput) the live table derived when the node's state changed; this pass only applies
 * the request: exclusions, `now` (cooldowns, attestations) and the tier's attestation rule.
 * Viable nodes are listed family by family (`runEnd`, `runPosition`), each with its fresh
 * score in quality mode.
 */
function filter(sc: Scratch, cx: Context): void {
  const { snapshot, live, chain, hint, exclude, now } = cx;
  const opts = snapshot.options;
  const isTier34 = cx.tier >= 3;
  // Hoisted so the per-node loop reads locals, not properties.
  const gate = live.gate;
  const liveDepth = live.depth;
  const rate = live.rate;
  const cooldownUntil = live.cooldownUntil;
  const attestedUntil = live.attestedUntil;
  const maxConcurrency = snapshot.maxConcurrency;
  const apiIndex = cx.apiIndex;
  const defaultTps = opts.defaultTokensPerSecond;
  const { idx, passed, quality } = sc;
  if (sc.runEnd.length <= chain.length) {
    sc.runEnd = new Int32Array(chain.length + 1);
    sc.runPosition = new Int32Array(chain.length + 1);
  }
  let runs = 0;
  // The request's exclusions as marks by node index, so the loop does not hash node ids.
  const excluded = markExcluded(snapshot, exclude);
  const tokensMs = cx.tokens * 1000;
  const staleBefore = cx.staleBefore;
  const wantQuality = !Number.isNaN(staleBefore);
  let n = 0;
  let p = 0;
  let considered = 0;
  let otherApi = 0;
  let transient = 0;
  let soonest = Number.POSITIVE_INFINITY;
  /** Best throughput among the viable measured nodes. */
  let bestTps = 0;

  for (let f = -1; f < chain.length; f++) {
    // Position -1 visits the hinted family first; its own position is then skipped.
    const family = f < 0 ? hint : chain[f];
    if (family === undefined || (f >= 0 && family === hint)) continue;
    const group = cx.bucket.families.get(family);
    if (group === undefined) continue;
    // A node of another API is no candidate at all, like a node of another tier.
    const slice = group.byApi[apiIndex];
    if (slice === undefined) {
      otherApi += group.indices.length;
      continue;
    }
    otherApi += slice.otherApi;
    const indices = slice.indices;
    const qualityAt = slice.qualityAt;
    const qualityScore = slice.qualityScore;
    considered += indices.length;
    for (let j = 0; j < indices.length; j++) {
      const i = indices[j]!;
      const g = gate[i]!;
      let reason = -1;
      if (excluded !== undefined && excluded[i] === 1) reason = R.excluded;
      else if (g === GATE.noState) reason = R.no_state;
      else if (g === GATE.notActive) reason = R.not_active;
      else if (cooldownUntil[i]! > now) {
        reason = R.cooling_down;
        soonest = Math.min(soonest, cooldownUntil[i]! - now);
      } else if (isTier34 && !(attestedUntil[i]! > now)) reason = R.not_attested;
      else if (g === GATE.full) {
        reason = R.at_capacity;
        // Time for the node to get one slot back at its throughput.
        const depth = liveDepth[i]!;
        const r = rate[i]!;
        const tps = r === r ? r : defaultTps;
        const excess = Number.isFinite(depth) ? Math.max(1, depth - maxConcurrency[i]! + 1) : 1;
        soonest = Math.min(soonest, (excess * tokensMs) / tps);
      }
      if (reason >= 0) {
        if (reason === R.excluded || reason === R.cooling_down || reason === R.at_capacity) {
          transient++;
        }
        passed[p++] = pack(i, reason);
        continue;
      }
      const r = rate[i]!;
      if (r === r && r > bestTps) bestTps = r;
      idx[n] = i;
      // Quality mode only (no other mode reads it): the score if fresh, else NaN (a missing
      // one is NaN too).
      if (wantQuality) quality[n] = qualityAt[j]! >= staleBefore ? qualityScore[j]! : Number.NaN;
      n++;
    }
    sc.runEnd[runs] = n;
    sc.runPosition[runs] = f + 1;
    runs++;
  }
  if (excluded !== undefined) unmarkExcluded(snapshot, exclude!, excluded);
  sc.runs = runs;
  sc.viable = n;
  sc.passedCount = p;
  sc.considered = considered;
  sc.otherApi = otherApi;
  sc.transient = transient;
  sc.soonestFreeMs = soonest;
  sc.bestTps = bestTps;
}

/**
 * Pass 2, the ranking: estimates every viable node, computes its ranking keys (see README,
 * "Ranking": within the latency target the mode decides; over it, every mode orders by
 * estimated response time), keeps the best `k` slots in `sc.top` by insertion (k is tiny,
 * the attempt budget, so this beats sorting all n), and writes each slot's passed-over
 * code at `packed[base + slot]` as if it were not listed. Returns how many were taken.
 */
function rank(
  sc: Scratch,
  cx: Context,
  mode: RankingMode,
  random: (() => number) | undefined,
  k: number,
  packed: number[],
  base: number,
): number {
  const { snapshot, live, target } = cx;
  const opts = snapshot.options;
  const {
    idx,
    runEnd,
    runPosition,
    depth: sDepth,
    service,
    resp: sResp,
    overTarget,
    preferenceKey,
    scoreKey,
    tieBreakKey,
    healthKey,
    quality,
    top,
  } = sc;
  const liveDepth = live.depth;
  const rate = live.rate;
  const latencyEwma = live.latencyEwmaMs;
  const healthScore = live.healthScore;
  const defaultTps = opts.defaultTokensPerSecond;
  const bias = opts.latencyBias;
  const tokensMs = cx.tokens * 1000;
  // Exploration: an idle node never measured is assumed as fast as the best measured one,
  // not the default guess, so it gets traffic and is measured instead of starved. Once it
  // has a queue the default applies again: one request at a time is all it risks.
  const bestTps = sc.bestTps;
  const explore = bestTps > defaultTps;
  const hinted = cx.hint !== undefined;
  // Whether `filter` wrote the slots' quality scores; without, every score counts as missing.
  const wantQuality = !Number.isNaN(cx.staleBefore);
  const jitter = random === undefined ? 0 : opts.jitter;
  const usdPerHour = snapshot.usdPerHour;
  const fallbackPrice = snapshot.fallbackUsdPerHour;
  // One call to `random` per decision seeds a xorshift32 stream for the per-node jitter:
  // cheaper than a call per node, and still reproducible under a seeded source.
  let bits = jitter === 0 ? 0 : (unit(random!()) * 4294967296) | 0 || 0x9e3779b9;
  let anyFresh = false;
  let len = 0;
  // The keys of the k-th best so far (`top[k - 1]`), kept in locals once the top is full:
  // most slots only need comparing with it, and this spares reading them back per slot.
  let lastPreference = 0;
  let lastMain = 0;
  let lastTieBreak = 0;
  let lastHealth = 0;
  let lastNode = 0;
  // Per-slot constants as locals: the loop then neither compares strings nor reads
  // module bindings (each read of one is checked for initialisation).
  const byResponse = mode === "fastest";
  const byLatency = mode === "latency";
  const byCost = mode === "cost";
  const byBalance = mode === "balanced";
  const overCode = R.over_latency_target;
  const lowerCode = R.ranked_lower;
  const groupWeight = GROUP_WEIGHT;
  const unitScale = TWO_OVER_2_32;
  let s = 0;
  for (let run = 0; run < sc.runs; run++) {
    // The family's position in visiting order, the same for every slot of the run.
    const position = runPosition[run]!;
    const end = runEnd[run]!;
    for (; s < end; s++) {
      const i = idx[s]!;
      const depth = liveDepth[i]!;
      const latency = latencyEwma[i]!;
      const r = rate[i]!;
      let ms: number;
      let resp: number;
      let over: number;
      if (r === r) {
        // serviceMs(tokens, tps), inlined: this division is the loop's most expensive step.
        ms = tokensMs / r;
        resp = responseMsFrom(depth, ms, latency, bias);
        over = resp <= target ? 0 : 1;
      } else {
        ms = tokensMs / defaultTps;
        resp = responseMsFrom(depth, ms, latency, bias);
        // An idle node never measured (no throughput, no latency) is not judged slow on the
        // default guess: the policy's order decides until observations come in. Otherwise a
        // newly added family would lose to any measured one, whatever the chain says.
        over = resp <= target || (depth === 0 && Number.isNaN(latency)) ? 0 : 1;
        if (explore && depth === 0) {
          ms = tokensMs / bestTps;
          resp = responseMsFrom(depth, ms, latency, bias);
          if (over === 1 && resp <= target) over = 0;
        }
      }
      packed[base + s] = pack(i, over === 1 ? overCode : lowerCode);

      let shake = 1;
      if (jitter !== 0) {
        bits ^= bits << 13;
        bits ^= bits >>> 17;
        bits ^= bits << 5;
        shake = 1 + jitter * ((bits >>> 0) * unitScale - 1);
      }
      // The keys stay in locals: most slots lose to the current k-th best at once, and only
      // the ones taken are written to the slot arrays.
      // The group (within the latency target or not) folds into preferenceKey to save a comparison.
      const group = over * groupWeight;
      const hintKey = group + (hinted && position === 0 ? 0 : 1);
      const q = wantQuality ? quality[s]! : Number.NaN;
      if (!Number.isNaN(q)) anyFresh = true;
      let preference = hintKey;
      let main: number;
      const within = group === 0;
      if (!within || byResponse) {
        main = resp * shake;
      } else if (byLatency) {
        preference = position;
        main = resp * shake;
      } else if (byCost) {
        main = costOn(usdPerHour, fallbackPrice, i, ms) * shake;
      } else if (byBalance) {
        main = costOn(usdPerHour, fallbackPrice, i, ms) * resp * shake;
      } else {
        // Quality: fresh scores first, best first.
        main = Number.isNaN(q) ? Number.POSITIVE_INFINITY : -q * shake;
      }
      // Most slots already lose to the k-th best on the first two keys (this is exactly
      // where orderedBefore would stop): the tie-breaks, in quality mode a division and a
      // read, are worked out only for the others.
      if (
        len === k &&
        (preference > lastPreference || (preference === lastPreference && main > lastMain))
      ) {
        continue;
      }
      let tieBreak = 0;
      let health = 0;
      if (within && (byCost || byBalance)) {
        tieBreak = resp;
      } else if (within && !byResponse && !byLatency) {
        // Quality: the nodes without a fresh score by price per unit of health.
        const h = healthScore[i]!;
        tieBreak = ((costOn(usdPerHour, fallbackPrice, i, ms) * 100) / Math.max(h, 1)) * shake;
        health = -h;
      }
      if (
        len === k &&
        !orderedBefore(
          preference,
          main,
          tieBreak,
          health,
          i,
          lastPreference,
          lastMain,
          lastTieBreak,
          lastHealth,
          lastNode,
        )
      ) {
        continue;
      }
      preferenceKey[s] = preference;
      scoreKey[s] = main;
      tieBreakKey[s] = tieBreak;
      healthKey[s] = health;
      sDepth[s] = depth;
      service[s] = ms;
      sResp[s] = resp;
      overTarget[s] = over;
      let at = len < k ? len++ : k - 1;
      while (at > 0) {
        const b = top[at - 1]!;
        const ahead = orderedBefore(
          preference,
          main,
          tieBreak,
          health,
          i,
          preferenceKey[b]!,
          scoreKey[b]!,
          tieBreakKey[b]!,
          healthKey[b]!,
          idx[b]!,
        );
        if (!ahead) break;
        top[at] = b;
        at--;
      }
      top[at] = s;
      if (len === k) {
        const last = top[k - 1]!;
        lastPreference = preferenceKey[last]!;
        lastMain = scoreKey[last]!;
        lastTieBreak = tieBreakKey[last]!;
        lastHealth = healthKey[last]!;
        lastNode = idx[last]!;
      }
    }
  }
  sc.anyFresh = anyFresh;
  return len;
}

/** The request's cost on node `i`, an unpriced node at the fallback price (see snapshot.ts). */
function costOn(usdPerHour: Float64Array, fallbackPrice: number, i: number, ms: number): number {
  const price = usdPerHour[i]!;
  return costUsdFrom(price === price ? price : fallbackPrice, ms);
}

/**
 * The ranking order on the keys themselves: lexicographic on the four keys (README's
 * k1..k4), then registration (node index). `a…` ranks before `b…` when this is true.
 */
function orderedBefore(
  aPreference: number,
  aMain: number,
  aTieBreak: number,
  aHealth: number,
  aNode: number,
  bPreference: number,
  bMain: number,
  bTieBreak: number,
  bHealth: number,
  bNode: number,
): boolean {
  if (aPreference !== bPreference) return aPreference < bPreference;
  if (aMain !== bMain) return aMain < bMain;
  if (aTieBreak !== bTieBreak) return aTieBreak < bTieBreak;
  if (aHealth !== bHealth) return aHealth < bHealth;
  return aNode < bNode;
}

/**
 * Removes the listed slots' codes from `packed[base…base + n)` (they are candidates, not
 * passed over), keeping the others in slot order. Returns the codes left in `packed`.
 */
function dropListed(sc: Scratch, len: number, packed: number[], base: number): number {
  const listed = sc.listed;
  // The listed slots in ascending order (len is at most maxCandidates).
  for (let r = 0; r < len; r++) {
    const s = sc.top[r]!;
    let at = r;
    while (at > 0 && listed[at - 1]! > s) {
      listed[at] = listed[at - 1]!;
      at--;
    }
    listed[at] = s;
  }
  let write = base + listed[0]!;
  for (let r = 0; r < len; r++) {
    const from = base + listed[r]! + 1;
    const to = r + 1 < len ? base + listed[r + 1]! : base + sc.viable;
    for (let p = from; p < to; p++) packed[write++] = packed[p]!;
  }
  return write;
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
  };
  const sc = scratchFor(bucket.size);
  filter(sc, cx);
  const n = sc.viable;
  if (n === 0) return rejectNone(sc, cx, policy);

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
    candidates[r] = {
      node: entry.spec,
      queueDepth: sc.depth[s]!,
      responseMs: sc.resp[s]!,
      costUsd: entry.usdPerHour === null ? null : costUsdFrom(entry.usdPerHour, sc.service[s]!),
      price: entry.price,
      quality: Number.isNaN(quality) ? null : quality,
      withinLatencyTarget: sc.overTarget[s] === 0,
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

/** Clamps an injected random value into [0, 1) so a bad source cannot break ranking. */
function unit(value: number): number {
  return value >= 0 && value < 1 ? value : 0.5;
}
