// The published allowlist of tier 3–4 nodes: a pure function of the node table, the
// attestation results and the revocation list. It says what anyone may know (identity,
// measurement, status), never how to reach or authenticate to a node.
import { attestationVerdict, findRevocation, isTeeTier, TdMeasurementSchema } from "@zml/contracts";
import type { AttestationResult, NodeSpec, Revocation } from "@zml/contracts";
import { z } from "zod";

export const ALLOWLIST_STATUSES = ["attested", "expired", "revoked", "failing"] as const;

export const AllowlistEntrySchema = z.object({
  node_id: z.string(),
  tier: z.number().int(),
  models: z.array(z.string()),
  accelerator_family: z.string(),
  /** The attested measurement (the approved one while `attested`); null before any quote. */
  measurement: TdMeasurementSchema.nullable(),
  tcb_status: z.string().nullable(),
  /** SHA-256 of the TLS public key (SPKI DER) the quote binds; dispatchers pin it. */
  tls_key_sha256: z.string().nullable(),
  /** ISO time of the latest attestation, null before any. */
  attested_at: z.string().nullable(),
  /** ISO time until which a passed attestation holds; null when it did not pass. */
  valid_until: z.string().nullable(),
  status: z.enum(ALLOWLIST_STATUSES),
  /** Why the node is not `attested`: the revocation's reason or the failure; null when attested. */
  reason: z.string().nullable(),
  revocation: z.object({ id: z.string(), reason: z.string() }).nullable(),
});
export type AllowlistEntry = z.infer<typeof AllowlistEntrySchema>;

export const AllowlistSchema = z.object({
  object: z.literal("allowlist"),
  /** ISO time the list was computed. */
  generated_at: z.string(),
  nodes: z.array(AllowlistEntrySchema),
});
export type Allowlist = z.infer<typeof AllowlistSchema>;

export interface AllowlistSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  results: ReadonlyMap<string, AttestationResult>;
  revocations: ReadonlyMap<string, Revocation>;
}

const iso = (ms: number) => new Date(ms).toISOString();

function entryOf(node: NodeSpec, sources: AllowlistSources, now: number): AllowlistEntry {
  const result = sources.results.get(node.id);
  const revocation =
    findRevocation(sources.revocations.values(), result ?? { node_id: node.id }) ?? undefined;
  const verdict = attestationVerdict(result, sources.revocations.values(), now, undefined, node);
  const status: AllowlistEntry["status"] = verdict.usable
    ? "attested"
    : verdict.reason === "revoked"
      ? "revoked"
      : verdict.reason === "expired"
        ? "expired"
        : "failing";
  const revoked = revocation
    ? { id: revocation.id, reason: revocation.reason }
    : status === "revoked"
      ? (result?.revocation ?? null)
      : null;
  return {
    node_id: node.id,
    tier: node.tier,
    models: [...node.models],
    accelerator_family: node.accelerator_family,
    measurement: result?.measurement ?? null,
    tcb_status: result?.tcb_status ?? null,
    tls_key_sha256: result?.tls_key_sha256 ?? null,
    attested_at: result ? iso(result.verified_at) : null,
    valid_until: result?.ok ? iso(result.expires_at) : null,
    status,
    reason: verdict.usable
      ? null
      : status === "revoked" && revoked
        ? revoked.reason
        : verdict.detail,
    revocation: status === "revoked" ? revoked : null,
  };
}

/** Every tier 3–4 node with its attestation status at `now`, by node id; tiers 1–2 never appear. */
export function buildAllowlist(sources: AllowlistSources, now: number): Allowlist {
  const nodes = [...sources.nodes.values()]
    .filter((n) => isTeeTier(n.tier))
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((n) => entryOf(n, sources, now));
  return { object: "allowlist", generated_at: iso(now), nodes };
}
