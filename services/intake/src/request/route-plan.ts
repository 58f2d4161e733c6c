import { createHeaders } from "@zml/bus";
import type { MsgHdrs } from "@zml/bus";
import { HEADERS, ZmlError } from "@zml/contracts";
import { encodePromptPrefix } from "@zml/routing";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { policyNameFor } from "./policy.ts";
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
    throw new ZmlError("unknown_model", `model '${fields.model}' does not exist`, {
      param: "model",
    });
  }
  const fallbackModels: string[] = [];
  fields.fallbackModels.forEach((id, i) => {
    if (!models.has(id)) {
      throw new ZmlError("unknown_model", `model '${id}' does not exist`, {
        param: `${fallbackField}.${i}`,
      });
    }
    if (id !== fields.model && !fallbackModels.includes(id)) fallbackModels.push(id);
  });
  if (!account.allowed_tiers.includes(fields.tier)) {
    throw new ZmlError("tier_not_allowed", `account may not use tier ${fields.tier}`, {
      param: "tier",
    });
  }
  return {
    model: model.id,
    fallbackModels,
    policy: policyNameFor(fields.policy, model.id, account, { models, policies }),
    tier: fields.tier,
  };
}

/**
 * The routing headers a `route.request` and a batch job share (every value was validated
 * before it gets here): the dispatcher reads them instead of the body.
 */
export function planHeaders(
  type: string,
  path: string,
  fields: RouteFields,
  plan: RoutePlan,
  account: AccountSpec,
): MsgHdrs {
  const h = createHeaders();
  h.set(HEADERS.type, type);
  h.set(HEADERS.model, plan.model);
  h.set(HEADERS.path, path);
  h.set(HEADERS.tier, String(plan.tier));
  h.set(HEADERS.policy, plan.policy);
  h.set(HEADERS.account, account.id);
  if (plan.fallbackModels.length > 0) h.set(HEADERS.fallbackModels, plan.fallbackModels.join(","));
  if (fields.acceleratorHint) h.set(HEADERS.acceleratorHint, fields.acceleratorHint);
  if (fields.sort) h.set(HEADERS.sort, fields.sort);
  if (fields.maxTokens !== undefined) h.set(HEADERS.maxTokens, String(fields.maxTokens));
  // Digests only, and never for tier 4: its prompts are sealed and its sessions pinned.
  if (fields.prefix !== undefined && plan.tier !== 4) {
    h.set(HEADERS.prefix, encodePromptPrefix(fields.prefix));
  }
  return h;
}
