import { costUsdFrom, prefillMsFrom, responseMsFrom } from "./estimate.ts";
import { PREFIX_BLOCK_CHARS, tokensOfChars } from "./prompt-prefix.ts";
import { pack, R } from "./passed-over.ts";
import type { ResolvedPolicy } from "./policy.ts";
import type { Context, Scratch } from "./decide-scratch.ts";
import type { RankingMode, RouteRequest } from "./types.ts";

/** Added to the preference key of nodes over the latency target: above any family position or hint key. */
const GROUP_WEIGHT = 1e9;

/** Maps a uint32 onto [0, 2). */
const TWO_OVER_2_32 = 2 / 4294967296;

/**
 * Pass 2, the ranking: estimates every viable node, computes its ranking keys (see README,
 * "Ranking": within the latency target the mode decides; over it, every mode orders by
 * estimated response time), keeps the best `k` slots in `sc.top` by insertion (k is tiny,
 * the attempt budget, so this beats sorting all n), and writes each slot's passed-over
 * code at `packed[base + slot]` as if it were not listed. Returns how many were taken.
 */
export function rank(
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
  // Prefix affinity: the prefill each node still owes the prompt joins every estimate.
  const prefix = cx.prefix;
  const prefillRate = live.prefillRate;
  const busyUntil = live.prefillBusyUntil;
  const now = cx.now;
  const defaultPrefill = opts.defaultPrefillTokensPerSecond;
  const blockTokens = tokensOfChars(PREFIX_BLOCK_CHARS);
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
      let prefill = 0;
      if (prefix !== undefined) {
        // The prompts sent before it are prefilled first, then this one's uncached tokens.
        const p = prefillRate[i]!;
        prefill =
          Math.max(0, busyUntil[i]! - now) +
          prefillMsFrom(
            prefix.promptTokens,
            prefix.blocks[i]! * blockTokens,
            p === p ? p : defaultPrefill,
          );
      }
      let ms: number;
      let resp: number;
      let over: number;
      if (r === r) {
        // serviceMs(tokens, tps), inlined: this division is the loop's most expensive step.
        ms = tokensMs / r;
        resp = responseMsFrom(depth, ms, latency, bias, prefill);
        over = resp <= target ? 0 : 1;
      } else {
        ms = tokensMs / defaultTps;
        resp = responseMsFrom(depth, ms, latency, bias, prefill);
        // An idle node never measured (no throughput, no latency) is not judged slow on the
        // default guess: the policy's order decides until observations come in. Otherwise a
        // newly added family would lose to any measured one, whatever the chain says.
        over = resp <= target || (depth === 0 && Number.isNaN(latency)) ? 0 : 1;
        if (explore && depth === 0) {
          ms = tokensMs / bestTps;
          resp = responseMsFrom(depth, ms, latency, bias, prefill);
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
export function dropListed(sc: Scratch, len: number, packed: number[], base: number): number {
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

export function rankingOf(request: RouteRequest, policy: ResolvedPolicy): RankingMode {
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

/** Clamps an injected random value into [0, 1) so a bad source cannot break ranking. */
function unit(value: number): number {
  return value >= 0 && value < 1 ? value : 0.5;
}
