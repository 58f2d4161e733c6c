import { attestationVerdict, isTeeTier } from "@zml/contracts";
import type { AttestationResult, AttestationVerdict, NodeSpec, Revocation } from "@zml/contracts";
import type { RoutingState } from "./routing-state.ts";

export interface AttestationSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  /** Latest attestation result per node, mirrored from KV. */
  results: ReadonlyMap<string, AttestationResult>;
  revocations: ReadonlyMap<string, Revocation>;
}

/**
 * Keeps the routing core's view of which tier 3/4 nodes are attested in step with the
 * attestation results and the revocation list, all from memory. A revocation takes a node
 * out of the next decision at once, before the attestation service republishes anything.
 */
export interface AttestationGate {
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
): AttestationGate {
  const verdictOf = (nodeId: string, now: number, model?: string) =>
    attestationVerdict(sources.results.get(nodeId), sources.revocations.values(), now, model);
  return {
    refresh(now) {
      const { live } = routing.current();
      for (const node of sources.nodes.values()) {
        if (!isTeeTier(node.tier)) continue;
        const result = sources.results.get(node.id);
        const usable = verdictOf(node.id, now).usable;
        live.setAttestedUntil(node.id, usable && result ? result.expires_at : 0);
      }
    },
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
  };
}
