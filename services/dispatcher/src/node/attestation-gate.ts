import { attestationVerdict, isTeeTier } from "@zml/contracts";
import type { AttestationResult, AttestationVerdict, NodeSpec, Revocation } from "@zml/contracts";
import type { RoutingState } from "../fleet/routing-state.ts";
import type { TlsPins } from "./node-pools.ts";

export interface AttestationSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  /** Latest attestation result per node, mirrored from KV. */
  results: ReadonlyMap<string, AttestationResult>;
  revocations: ReadonlyMap<string, Revocation>;
}

export interface AttestationGateOptions {
  /** Asks the attestation service to attest the node afresh (fire and forget). */
  reattest(nodeId: string): void;
  clock: () => number;
}

/**
 * Keeps the routing core's view of which tier 3/4 nodes are attested in step with the
 * attestation results, the revocation list and the node specs, all from memory. A
 * revocation, an endpoint change or a TLS key that differs from the attested one takes a
 * node out of the next decision at once, before the attestation service republishes
 * anything. It is also where pools learn the key to pin ({@link TlsPins}).
 */
export interface AttestationGate extends TlsPins {
  /** Recomputes every tier 3/4 node's attested-until; call when results, revocations or nodes change. */
  refresh(now: number): void;
  /**
   * Attested tier 3/4 nodes of `tier` whose approved measurement does not cover `model`.
   * Nodes with no usable attestation at all are left to the routing core (`not_attested`).
   */
  notApprovedFor(model: string, tier: number, now: number): ReadonlySet<string>;
  /** The last check before any payload goes to a tier 3/4 node. */
  verdict(nodeId: string, model: string, now: number): AttestationVerdict;
}

export function createAttestationGate(
  sources: AttestationSources,
  routing: RoutingState,
  options: AttestationGateOptions,
): AttestationGate {
  // Results this dispatcher caught presenting another TLS key, by the result's verified_at:
  // unusable here until a new result arrives.
  const mismatched = new Map<string, number>();
  const verdictOf = (nodeId: string, now: number, model?: string): AttestationVerdict => {
    const result = sources.results.get(nodeId);
    const node = sources.nodes.get(nodeId);
    if (result !== undefined && mismatched.get(nodeId) === result.verified_at) {
      return {
        usable: false,
        reason: "key_mismatch",
        detail: "the node presented another TLS key than the attested one",
      };
    }
    // A node missing from the table has no endpoint an attestation could hold for.
    return attestationVerdict(
      result,
      sources.revocations.values(),
      now,
      model,
      node ?? { endpoint: "" },
    );
  };
  const refresh = (now: number) => {
    const { live } = routing.current();
    for (const node of sources.nodes.values()) {
      if (!isTeeTier(node.tier)) continue;
      const result = sources.results.get(node.id);
      const usable = verdictOf(node.id, now).usable;
      live.setAttestedUntil(node.id, usable && result ? result.expires_at : 0);
    }
  };
  return {
    refresh,
    notApprovedFor(model, tier, now) {
      const out = new Set<string>();
      if (!isTeeTier(tier)) return out;
      for (const node of sources.nodes.values()) {
        if (node.tier !== tier) continue;
        const verdict = verdictOf(node.id, now, model);
        if (!verdict.usable && verdict.reason === "model_not_approved") out.add(node.id);
      }
      return out;
    },
    verdict: (nodeId, model, now) => verdictOf(nodeId, now, model),
    pinFor(node) {
      // The spec the pool connects to must be the one the attestation was made at.
      if (sources.nodes.get(node.id)?.endpoint !== node.endpoint) return undefined;
      if (!verdictOf(node.id, options.clock()).usable) return undefined;
      return sources.results.get(node.id)?.tls_key_sha256 ?? undefined;
    },
    onMismatch(nodeId) {
      const result = sources.results.get(nodeId);
      if (result === undefined || mismatched.get(nodeId) === result.verified_at) return;
      mismatched.set(nodeId, result.verified_at);
      refresh(options.clock());
      options.reattest(nodeId);
    },
  };
}
