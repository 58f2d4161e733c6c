import { RoutingError, ROUTING_ERROR_CODES } from "./errors.ts";
import { estimateCostUsd, estimateResponseMs } from "./estimate.ts";
import { effectiveDepth, LIVE_STATUS, type LiveTable } from "./live-table.ts";
import type { ResolvedPolicy } from "./policy.ts";
import { expandPassedOver, pack, R } from "./passed-over.ts";
import type { NodeEntry, RoutingSnapshot } from "./snapshot.ts";
import type { Tier } from "@zml/contracts";
import type {
  Decision,
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
  idx: Int32Array;
  grp: Float64Array;
  k1: Float64Array;
  k2: Float64Array;
  k3: Float64Array;
  k4: Float64Array;
  depth: Float64Array;
  resp: Float64Array;
  tps: Float64Array;
  quality: Float64Array;
  inTop: Uint8Array;
  passed: Int32Array;
  top: Int32Array;

  constructor(size: number) {
    this.size = size;
    this.idx = new Int32Array(size);
    this.grp = new Float64Array(size);
    this.k1 = new Float64Array(size);
    this.k2 = new Float64Array(size);
    this.k3 = new Float64Array(size);
    this.k4 = new Float64Array(size);
    this.depth = new Float64Array(size);
    this.resp = new Float64Array(size);
    this.tps = new Float64Array(size);
    this.quality = new Float64Array(size);
    this.inTop = new Uint8Array(size);
    this.passed = new Int32Array(size);
    this.top = new Int32Array(64);
  }
}

let scratch = new Scratch(64);
const STOP = Number(process.env.STOP ?? 0);

function scratchFor(n: number): Scratch {
  if (n > scratch.size) scratch = new Scratch(Math.max(n, scratch.size * 2));
  return scratch;
}

/** Whether slot `a` ranks before slot `b`: lexicographic on (group, k1..k4, registration). */
function before(sc: Scratch, a: number, b: number): boolean {
  const grp = sc.grp;
  if (grp[a] !== grp[b]) return grp[a]! < grp[b]!;
  const k1 = sc.k1;
  if (k1[a] !== k1[b]) return k1[a]! < k1[b]!;
  const k2 = sc.k2;
  if (k2[a] !== k2[b]) return k2[a]! < k2[b]!;
  const k3 = sc.k3;
  if (k3[a] !== k3[b]) return k3[a]! < k3[b]!;
  const k4 = sc.k4;
  if (k4[a] !== k4[b]) return k4[a]! < k4[b]!;
  return sc.idx[a]! < sc.idx[b]!;
}

const M = { latency: 0, fastest: 1, cost: 2, balanced: 3, quality: 4 } as const;
const MODES: Readonly<Record<RankingMode, number>> = M;

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

function reject(
  reason: "unknown_model" | "no_node_for_model_tier" | "saturated",
  detail: string,
  passedOver: PassedOver[],
  retryAfterS: number | undefined,
  queueForMs: number,
): Rejection {
  const code =
    reason === "unknown_model"
      ? "unknown_model"
      : reason === "saturated"
        ? "saturated"
        : "no_node_available";
  const rejection: Rejection = { ok: false, reason, code, detail, passedOver, queueForMs };
  if (retryAfterS !== undefined) rejection.retryAfterS = retryAfterS;
  return rejection;
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
  #packed: Int32Array;
  #passedOver: PassedOver[] | undefined;

  constructor(
    model: string,
    tier: Tier,
    policy: string,
    ranking: RankingMode,
    candidates: RankedCandidate[],
    viable: number,
    estimates: { costUsd: number | null; responseMs: number },
    latencyTargetMet: boolean,
    hintApplied: boolean,
    qualityFresh: boolean | null,
    nodes: readonly NodeEntry[],
    packed: Int32Array,
  ) {
    this.model = model;
    this.tier = tier;
    this.policy = policy;
    this.ranking = ranking;
    this.candidates = candidates;
    this.viable = viable;
    this.estimates = estimates;
    this.latencyTargetMet = latencyTargetMet;
    this.hintApplied = hintApplied;
    this.qualityFresh = qualityFresh;
    this.#nodes = nodes;
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
 * snapshot.
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
  const tokens =
    request.expectedTokens !== undefined &&
    request.expectedTokens > 0 &&
    Number.isFinite(request.expectedTokens)
      ? request.expectedTokens
      : opts.expectedTokens;
  const target = policy.latencyTargetMs;
  const chain = policy.chain;
  const hint =
    request.acceleratorHint !== undefined && chain.includes(request.acceleratorHint)
      ? request.acceleratorHint
      : undefined;
  const exclude = request.exclude !== undefined && request.exclude.size > 0 ? request.exclude : undefined;
  const random = request.random;
  const jitter = random === undefined ? 0 : opts.jitter;
  const staleBefore = now - opts.qualityStalenessMs;
  const isTier34 = tier >= 3;
  const sc = scratchFor(bucket.size);
  const sIdx = sc.idx;
  const sGrp = sc.grp;
  const sK1 = sc.k1;
  const sK2 = sc.k2;
  const sK3 = sc.k3;
  const sK4 = sc.k4;
  const sDepth = sc.depth;
  const sResp = sc.resp;
  const sTps = sc.tps;
  const sQuality = sc.quality;
  const sInTop = sc.inTop;
  const sPassed = sc.passed;
  const top = sc.top;

  if (STOP === 1) return undefined as unknown as Decision;
  let passed = 0;
  let considered = 0;
  let transient = 0;
  let soonestFreeMs = Number.POSITIVE_INFINITY;
  let n = 0;
  let anyFresh = false;

  // Hoisted so the per-node loop reads locals, not properties.
  const status = live.status;
  const cooldownUntil = live.cooldownUntil;
  const attestedUntil = live.attestedUntil;
  const polledDepth = live.polledDepth;
  const inFlight = live.inFlight;
  const inFlightAtPoll = live.inFlightAtPoll;
  const liveTps = live.tokensPerSecond;
  const latencyEwma = live.latencyEwmaMs;
  const healthScore = live.healthScore;
  const defaultTps = opts.defaultTokensPerSecond;
  const bias = opts.latencyBias;
  const fallbackPrice = snapshot.fallbackUsdPerHour;
  const maxConcurrency = snapshot.maxConcurrency;
  const usdPerHour = snapshot.usdPerHour;
  const specs = snapshot.nodes;
  const mode = MODES[ranking];
  const qualityMode = mode === M.quality;

  for (let f = -1; f < chain.length; f++) {
    // Slot -1 visits the hinted family first; its regular slot is then skipped.
    const family = f < 0 ? hint : chain[f];
    if (family === undefined || (f >= 0 && family === hint)) continue;
    const group = bucket.families.get(family);
    if (group === undefined) continue;
    const famPos = f + 1;
    const hintKey = family === hint ? 0 : 1;
    const indices = group.indices;
    const qualityScore = group.qualityScore;
    const qualityAt = group.qualityAt;
    considered += indices.length;
    for (let j = 0; j < indices.length; j++) {
      const i = indices[j]!;
      let reason = -1;
      let depth = 0;
      let tps = liveTps[i]!;
      if (!(tps > 0 && tps < Infinity)) tps = defaultTps;
      if (exclude !== undefined && exclude.has(specs[i]!.spec.id)) reason = R.excluded;
      else if (status[i] !== LIVE_STATUS.active) {
        reason = status[i] === LIVE_STATUS.unknown ? R.no_state : R.not_active;
      } else if (cooldownUntil[i]! > now) {
        reason = R.cooling_down;
        soonestFreeMs = Math.min(soonestFreeMs, cooldownUntil[i]! - now);
      } else if (isTier34 && !(attestedUntil[i]! > now)) reason = R.not_attested;
      else {
        depth = polledDepth[i]! + Math.max(0, inFlight[i]! - inFlightAtPoll[i]!);
        const limit = maxConcurrency[i]!;
        if (!(depth < limit)) {
          reason = R.at_capacity;
          const excess = Number.isFinite(depth) ? depth - limit + 1 : 1;
          soonestFreeMs = Math.min(soonestFreeMs, (excess * tokens * 1000) / tps);
        }
      }
      if (reason >= 0) {
        if (reason === R.excluded || reason === R.cooling_down || reason === R.at_capacity) {
          transient++;
        }
        sPassed[passed++] = pack(i, reason);
        continue;
      }

      const resp = estimateResponseMs(depth, tokens, tps, latencyEwma[i]!, bias);
      const shake = jitter === 0 ? 1 : 1 + jitter * (2 * unit(random!()) - 1);
      const within = resp <= target;
      sIdx[n] = i;
      sDepth[n] = depth;
      sResp[n] = resp;
      sTps[n] = tps;
      sGrp[n] = within ? 0 : 1;
      sK3[n] = 0;
      sK4[n] = 0;
      if (!within) {
        // Over the target, only closeness to it matters, whatever the policy.
        sK1[n] = hintKey;
        sK2[n] = resp * shake;
      } else if (mode === M.latency) {
        sK1[n] = famPos;
        sK2[n] = resp * shake;
      } else if (mode === M.fastest) {
        sK1[n] = hintKey;
        sK2[n] = resp * shake;
      } else {
        const price = usdPerHour[i]!;
        const cost = estimateCostUsd(price === price ? price : fallbackPrice, tokens, tps);
        sK1[n] = hintKey;
        if (mode === M.cost) {
          sK2[n] = cost * shake;
          sK3[n] = resp;
        } else if (mode === M.balanced) {
          sK2[n] = cost * resp * shake;
          sK3[n] = resp;
        } else {
          // Quality: fresh scores first, best first; the rest by price per unit of health.
          const health = healthScore[i]!;
          sK3[n] = ((cost * 100) / Math.max(health, 1)) * shake;
          sK4[n] = -health;
        }
      }
      if (qualityMode) {
        const score = qualityAt[j]! >= staleBefore ? qualityScore[j]! : Number.NaN;
        sQuality[n] = score;
        if (Number.isNaN(score) || !within) sK2[n] = within ? Infinity : sK2[n]!;
        else {
          sK2[n] = -score * shake;
          anyFresh = true;
        }
      } else sQuality[n] = Number.NaN;
      n++;
    }
  }

  if (STOP === 2) return undefined as unknown as Decision;
  if (n === 0) {
    const passedOver = expandPassedOver(snapshot.nodes, sPassed.subarray(0, passed));
    if (considered === 0) {
      return reject(
        "no_node_for_model_tier",
        `no node of policy "${policy.name}" families [${chain.join(", ")}] serves "${model}" at tier ${tier}`,
        passedOver,
        opts.noNodeRetryAfterS,
        0,
      );
    }
    if (transient > 0) {
      const retryAfterS = Number.isFinite(soonestFreeMs)
        ? Math.min(opts.maxRetryAfterS, Math.max(1, Math.ceil(soonestFreeMs / 1000)))
        : 1;
      return reject(
        "saturated",
        `all ${transient} usable nodes for "${model}" at tier ${tier} are full or cooling down`,
        passedOver,
        retryAfterS,
        policy.maxQueueMs,
      );
    }
    return reject(
      "no_node_for_model_tier",
      `none of the ${considered} nodes for "${model}" at tier ${tier} is active${isTier34 ? " and attested" : ""}`,
      passedOver,
      opts.noNodeRetryAfterS,
      0,
    );
  }

  // Top-k by insertion: k is tiny (the attempt budget), so this beats sorting all n.
  const k = Math.min(opts.maxCandidates, n);
  let len = 0;
  for (let s = 0; s < n; s++) {
    sInTop[s] = 0;
    if (len === k && !before(sc, s, top[k - 1]!)) continue;
    let p = len < k ? len++ : k - 1;
    while (p > 0 && before(sc, s, top[p - 1]!)) {
      top[p] = top[p - 1]!;
      p--;
    }
    top[p] = s;
  }

  if (STOP === 3) return undefined as unknown as Decision;
  const candidates = new Array<RankedCandidate>(len);
  for (let r = 0; r < len; r++) {
    const s = top[r]!;
    sInTop[s] = 1;
    const entry = snapshot.nodes[sIdx[s]!]!;
    const quality = sQuality[s]!;
    candidates[r] = {
      node: entry.spec,
      queueDepth: sDepth[s]!,
      responseMs: sResp[s]!,
      costUsd:
        entry.usdPerHour === null ? null : estimateCostUsd(entry.usdPerHour, tokens, sTps[s]!),
      quality: ranking === "quality" && !Number.isNaN(quality) ? quality : null,
      withinLatencyTarget: sGrp[s] === 0,
    };
  }
  const chosen = candidates[0]!;
  const chosenWithin = chosen.withinLatencyTarget;
  const packed = new Int32Array(passed + n - len);
  packed.set(sPassed.subarray(0, passed));
  let p = passed;
  for (let s = 0; s < n; s++) {
    if (sInTop[s] === 1) continue;
    const why = chosenWithin && sGrp[s] === 1 ? R.over_latency_target : R.ranked_lower;
    packed[p++] = pack(sIdx[s]!, why);
  }

  if (STOP === 4) return undefined as unknown as Decision;
  return new RoutedDecision(
    model,
    tier,
    policy.name,
    ranking,
    candidates,
    n,
    { costUsd: chosen.costUsd, responseMs: chosen.responseMs },
    chosenWithin,
    hint !== undefined,
    ranking === "quality" ? anyFresh : null,
    snapshot.nodes,
    packed,
  );
}

/** Clamps an injected random value into [0, 1) so a bad source cannot break ranking. */
function unit(value: number): number {
  return value >= 0 && value < 1 ? value : 0.5;
}
