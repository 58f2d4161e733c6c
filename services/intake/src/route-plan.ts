import { ZmlError } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { resolvePolicyName } from "./policy.ts";
import type { RouteFields } from "./route-fields.ts";

/** Everything intake decides about a request before it goes on the bus. */
export interface RoutePlan {
  model: string;
  /** Distinct known models after `model`, in the client's order. */
  fallbackModels: string[];
  policy: string;
  tier: number;
}

/**
 * Checks a request against the configuration in memory: the model and every fallback
 * exist (404 `unknown_model` naming the field), the account may use the tier (403), and
 * the policy resolves (400 `unknown_policy`). Pure: memory reads only.
 */
export function planRoute(
  fields: RouteFields,
  account: AccountSpec,
  models: ReadonlyMap<string, ModelSpec>,
  policies: ReadonlyMap<string, PolicySpec>,
  fallbackField: "models" | "fallback_models",
): RoutePlan {
  const model = models.get(fields.model);
  if (!model) {
    throw new ZmlError("unknown_model", `model '${fields.model}' does not exist`, "model");
  }
  const fallbackModels: string[] = [];
  fields.fallbackModels.forEach((id, i) => {
    if (!models.has(id)) {
      throw new ZmlError("unknown_model", `model '${id}' does not exist`, `${fallbackField}.${i}`);
    }
    if (id !== fields.model && !fallbackModels.includes(id)) fallbackModels.push(id);
  });
  if (!account.allowed_tiers.includes(fields.tier)) {
    throw new ZmlError("tier_not_allowed", `account may not use tier ${fields.tier}`, "tier");
  }
  return {
    model: model.id,
    fallbackModels,
    policy: resolvePolicyName(fields.policy, model, account, policies),
    tier: fields.tier,
  };
}
