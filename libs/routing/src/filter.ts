import { GATE } from "./live-table.ts";
import { pack, R } from "./passed-over.ts";
import { markExcluded, unmarkExcluded } from "./decide-scratch.ts";
import type { Context, Scratch } from "./decide-scratch.ts";

/**
 * Pass 1, the filter: walks the policy's families (the hinted one first), narrowed to the
 * nodes serving the request's API (`ApiSlice` in snapshot.ts), and records why each unusable
 * node is out. What does not depend on the request (effective depth, usable or full,
 * throughput) the live table derived when the node's state changed; this pass only applies
 * the request: exclusions, `now` (cooldowns, attestations) and the tier's attestation rule.
 * Viable nodes are listed family by family (`runEnd`, `runPosition`), each with its fresh
 * score in quality mode.
 */
export function filter(sc: Scratch, cx: Context): void {
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
