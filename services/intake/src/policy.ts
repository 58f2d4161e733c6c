import { ZmlError } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";

/**
 * The account default when nothing else names a policy: `balanced` over the families in
 * the order their nodes were registered (the dispatcher builds its chain).
 */
export const DEFAULT_POLICY_NAME = "balanced";

/**
 * Resolution order (design §3.1): the request's `policy` → the model's default → the
 * account's default → {@link DEFAULT_POLICY_NAME}. A policy the request names must exist; a
 * stale default that names a deleted policy falls through to the next rule instead of
 * failing every request for that model.
 */
export function resolvePolicyName(
  requested: string | undefined,
  model: ModelSpec,
  account: AccountSpec,
  policies: ReadonlyMap<string, PolicySpec>,
): string {
  if (requested !== undefined) {
    if (policies.has(requested) || requested === DEFAULT_POLICY_NAME) return requested;
    throw new ZmlError("unknown_policy", `unknown policy '${requested}'`, "policy");
  }
  for (const name of [model.default_policy, account.default_policy]) {
    if (name !== undefined && policies.has(name)) return name;
  }
  return DEFAULT_POLICY_NAME;
}
