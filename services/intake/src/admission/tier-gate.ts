// Tier authorisation, first: an account asking for a tier it may not use is told so before
// any check of its body's shape, on every path. The order of the answers would otherwise tell
// a caller which checks exist behind the one it has not passed.
import { TierSchema, ZmlError } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";

/** The tier of every session and of every sealed body, whatever the body says. */
export const SEALED_TIER = 4;

/**
 * The tiers a parsed body asks for, read before its shape is checked: its `tier` (default 1),
 * and tier 4 when it names a `session_id` (sessions are tier 4). A `tier` that is no tier
 * (not an integer 1–4) asks for nothing here: the shape check names it.
 */
export function tiersAsked(body: object): number[] {
  const { tier, session_id } = body as { tier?: unknown; session_id?: unknown };
  const asked: number[] = [];
  if (tier === undefined) asked.push(1);
  else if (TierSchema.safeParse(tier).success) asked.push(tier as number);
  if (session_id !== undefined) asked.push(SEALED_TIER);
  return asked;
}

/** Throws 403 `tier_not_allowed` (param `tier`) unless the account may use every tier asked. */
export function authoriseTiers(account: AccountSpec, tiers: readonly number[]): void {
  const refused = tiers.find((t) => !account.allowed_tiers.includes(t));
  if (refused !== undefined) {
    throw new ZmlError("tier_not_allowed", `account may not use tier ${refused}`, {
      param: "tier",
    });
  }
}

/** A check to run on a parsed body before its shape is: the account may use its tiers. */
export function tierGate(account: AccountSpec): (body: object) => void {
  return (body) => authoriseTiers(account, tiersAsked(body));
}
