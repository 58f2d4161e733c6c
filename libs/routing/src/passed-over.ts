import type { SaturationDetail } from "@zml/contracts";
import type { NodeEntry, PassedOver, PassOverReason } from "./types.ts";

/*
 * A decision records why each other node lost as one packed integer per node
 * (`index * 8 + reason`) and builds the objects only when someone reads them, so the hot
 * path does not allocate an object per node.
 */

const REASONS: readonly PassOverReason[] = [
  "excluded",
  "no_state",
  "not_active",
  "cooling_down",
  "not_attested",
  "at_capacity",
  "over_latency_target",
  "ranked_lower",
];

/** Reason codes, the positions in `REASONS`. */
export const R = {
  excluded: 0,
  no_state: 1,
  not_active: 2,
  cooling_down: 3,
  not_attested: 4,
  at_capacity: 5,
  over_latency_target: 6,
  ranked_lower: 7,
} as const;

export function pack(nodeIndex: number, reason: number): number {
  return nodeIndex * 8 + reason;
}

/**
 * The passed-over objects of `packed`. With `overTargetIsRankedLower` (the chosen node is
 * itself over the latency target), `over_latency_target` codes read as `ranked_lower`: the
 * target explains no loss when nothing met it.
 */
export function expandPassedOver(
  nodes: readonly NodeEntry[],
  packed: ArrayLike<number>,
  overTargetIsRankedLower = false,
): PassedOver[] {
  const out = new Array<PassedOver>(packed.length);
  for (let p = 0; p < packed.length; p++) {
    const code = packed[p]!;
    const spec = nodes[code >>> 3]!.spec;
    let reason = code & 7;
    if (overTargetIsRankedLower && reason === R.over_latency_target) reason = R.ranked_lower;
    out[p] = { nodeId: spec.id, family: spec.accelerator_family, reason: REASONS[reason]! };
  }
  return out;
}

/**
 * The counts of a rejection: every node considered was passed over (none was viable), so
 * `considered` is the length of the list.
 */
export function saturationOf(passedOver: readonly PassedOver[]): SaturationDetail {
  const detail = {
    considered: passedOver.length,
    full: 0,
    cooling: 0,
    inactive: 0,
    unattested: 0,
    failed: 0,
  };
  for (const { reason } of passedOver) {
    if (reason === "at_capacity") detail.full++;
    else if (reason === "cooling_down") detail.cooling++;
    else if (reason === "not_active" || reason === "no_state") detail.inactive++;
    else if (reason === "not_attested") detail.unattested++;
    else if (reason === "excluded") detail.failed++;
  }
  return detail;
}
