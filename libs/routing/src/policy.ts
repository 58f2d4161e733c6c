import type { CostPriority, PolicySpec } from "@zml/contracts";
import type { Rejection } from "./types.ts";
import { saturationOf } from "./passed-over.ts";

/** A policy ready for {@link decide}: the preference chain sorted by priority. */
export interface ResolvedPolicy {
  readonly name: string;
  /** Families in preference order: ascending `priority`, list order among equal priorities. */
  readonly chain: readonly string[];
  readonly latencyTargetMs: number;
  readonly costPriority: CostPriority;
  readonly queueOnSaturation: boolean;
  readonly maxQueueMs: number;
  /** The policy's explicit `first_byte_timeout_ms`, if any. */
  readonly firstByteTimeoutMs: number | undefined;
  readonly spec: PolicySpec;
}

/** Where the applied policy came from. */
export type PolicySource = "request" | "model" | "account" | "default";

export interface PolicyResolution<P = ResolvedPolicy> {
  ok: true;
  policy: P;
  source: PolicySource;
}

/** The name of the account default policy. */
export const DEFAULT_POLICY_NAME = "balanced";

/** Sorts the preference chain by priority (stable) and drops repeated families. */
export function compilePolicy(spec: PolicySpec): ResolvedPolicy {
  const sorted = spec.accelerator_preference
    .map((pref, i) => ({ pref, i }))
    .sort((a, b) => a.pref.priority - b.pref.priority || a.i - b.i);
  const chain: string[] = [];
  for (const { pref } of sorted) if (!chain.includes(pref.family)) chain.push(pref.family);
  return Object.freeze({
    name: spec.name,
    chain: Object.freeze(chain),
    latencyTargetMs: spec.latency_target_ms,
    costPriority: spec.cost_priority,
    queueOnSaturation: spec.queue_on_saturation,
    maxQueueMs: spec.queue_on_saturation ? spec.max_queue_ms : 0,
    firstByteTimeoutMs: spec.first_byte_timeout_ms,
    spec,
  });
}

/** The built-in account default: `balanced` over the families in registration order. */
export function builtinDefaultPolicy(
  familiesInRegistrationOrder: readonly string[],
  latencyTargetMs: number,
): ResolvedPolicy {
  return compilePolicy({
    name: DEFAULT_POLICY_NAME,
    accelerator_preference: familiesInRegistrationOrder.map((family, i) => ({
      family,
      priority: i + 1,
    })),
    latency_target_ms: latencyTargetMs,
    cost_priority: "balanced",
    queue_on_saturation: false,
    max_queue_ms: 0,
    prefix_affinity: true,
  });
}

/**
 * What policy resolution reads: the registered policies, the models' defaults and the
 * policy that applies when nothing else does. A `RoutingSnapshot` is one (its
 * `policies` always hold `balanced`); intake passes its config maps and a name-only default.
 */
export interface PolicyCatalog<P extends { name: string }> {
  readonly policies: ReadonlyMap<string, P>;
  readonly models: ReadonlyMap<string, { default_policy?: string | undefined }>;
  /** The account default, named {@link DEFAULT_POLICY_NAME}. */
  readonly defaultPolicy: P;
}

/**
 * Picks the policy for a request: the request's `policy` → the model's
 * `default_policy` → the account's `default_policy` → `balanced` (a registered policy of
 * that name, else the built-in one). An unknown policy named by the request is rejected; a
 * dangling default on a model or account falls through to the next level (the snapshot
 * lists it in `warnings`). This is the one resolver: intake resolves with it and sends the
 * name; the dispatcher resolves that name with it again, which is a lookup.
 */
export function resolvePolicy<P extends { name: string } = ResolvedPolicy>(
  catalog: PolicyCatalog<P>,
  request: { policy?: string | undefined; model: string },
  account: { default_policy?: string | undefined } = {},
): PolicyResolution<P> | Rejection {
  if (request.policy !== undefined && request.policy !== "") {
    const named =
      catalog.policies.get(request.policy) ??
      (request.policy === catalog.defaultPolicy.name ? catalog.defaultPolicy : undefined);
    if (named) return { ok: true, policy: named, source: "request" };
    return {
      ok: false,
      reason: "unknown_policy",
      code: "unknown_policy",
      detail: `policy "${request.policy}" is not registered`,
      passedOver: [],
      saturation: saturationOf([]),
      queueForMs: 0,
    };
  }
  const modelDefault = catalog.models.get(request.model)?.default_policy;
  const fromModel = modelDefault === undefined ? undefined : catalog.policies.get(modelDefault);
  if (fromModel) return { ok: true, policy: fromModel, source: "model" };
  const accountDefault = account.default_policy;
  const fromAccount =
    accountDefault === undefined ? undefined : catalog.policies.get(accountDefault);
  if (fromAccount) return { ok: true, policy: fromAccount, source: "account" };
  return { ok: true, policy: catalog.defaultPolicy, source: "default" };
}
