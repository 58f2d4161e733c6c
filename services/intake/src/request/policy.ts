import { ZmlError } from "@zml/contracts";
import type { AccountSpec, ModelSpec, PolicySpec } from "@zml/contracts";
import { DEFAULT_POLICY_NAME, resolvePolicy } from "@zml/routing";

/** Intake forwards a name only; the dispatcher builds the built-in default's chain. */
const BUILTIN_DEFAULT = { name: DEFAULT_POLICY_NAME };

/**
 * The name of the policy a request runs under, by the routing core's resolver (request →
 * model default → account default → `balanced`), read from intake's config in memory.
 * Intake sends this name; the dispatcher trusts it. Throws `unknown_policy` naming `policy`.
 */
export function policyNameFor(
  requested: string | undefined,
  modelId: string,
  account: AccountSpec,
  config: { models: ReadonlyMap<string, ModelSpec>; policies: ReadonlyMap<string, PolicySpec> },
): string {
  const resolved = resolvePolicy(
    { policies: config.policies, models: config.models, defaultPolicy: BUILTIN_DEFAULT },
    { policy: requested, model: modelId },
    account,
  );
  if (!resolved.ok) {
    throw new ZmlError(resolved.code, `unknown policy '${requested}'`, { param: "policy" });
  }
  return resolved.policy.name;
}
