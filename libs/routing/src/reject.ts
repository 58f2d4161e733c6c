import { expandPassedOver, saturationOf } from "./passed-over.ts";
import type { ResolvedPolicy } from "./policy.ts";
import type { Context, Scratch } from "./decide-scratch.ts";
import type { PassedOver, Rejection } from "./types.ts";

const REJECTION_CODES = {
  unknown_model: "unknown_model",
  api_not_served: "api_not_served",
  no_node_for_model_tier: "no_node_available",
  no_usable_node: "no_usable_node",
  saturated: "saturated",
} as const;

export function reject(
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

export function rejectNone(sc: Scratch, cx: Context, policy: ResolvedPolicy): Rejection {
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
