import type { NodeSpec } from "@zml/contracts";
import type { FleetView } from "./fleet-view.ts";

export interface Candidate {
  node: NodeSpec;
  /** Node-reported queue depth plus this dispatcher's own in-flight requests to it. */
  queueDepth: number;
}

export type Selection =
  | { ok: true; candidates: Candidate[] }
  | { ok: false; reason: "no_node_available" | "saturated" };

/**
 * The walking skeleton's routing rule: Active nodes of the request's tier that serve the
 * model, not cooling down and under capacity, least loaded first (ties broken at random so
 * that replicas do not all pick the same node). Pure: `now` and `random` are passed in.
 */
export function selectNodes(
  view: FleetView,
  request: { model: string; tier: number; exclude: ReadonlySet<string> },
  now: number,
  random: () => number,
): Selection {
  const candidates: Array<Candidate & { tieBreak: number }> = [];
  let servable = 0;
  for (const node of view.nodes()) {
    if (node.tier !== request.tier || !node.models.includes(request.model)) continue;
    const state = view.state(node.id);
    // Only Active nodes with no probe pending take traffic (design §4).
    if (!state || state.status !== "Active" || state.probe_pending) continue;
    servable++;
    if (request.exclude.has(node.id) || view.cooldownUntil(node.id) > now) continue;
    const inFlight = view.inFlight(node.id);
    if (inFlight >= node.max_concurrency) continue;
    candidates.push({ node, queueDepth: state.queue_depth + inFlight, tieBreak: random() });
  }
  if (candidates.length === 0) {
    return { ok: false, reason: servable === 0 ? "no_node_available" : "saturated" };
  }
  candidates.sort((a, b) => a.queueDepth - b.queueDepth || a.tieBreak - b.tieBreak);
  return { ok: true, candidates: candidates.map(({ node, queueDepth }) => ({ node, queueDepth })) };
}
