// Whether a request may go to its tier-4 session's node: a pure function of the session,
// the request and what the dispatcher knows about the node, all from memory.
import { ZmlError } from "@zml/contracts";
import type { AttestationVerdict, NodeSpec, NodeState, Session } from "@zml/contracts";
import { LIVE_STATUS } from "@zml/routing";
import { spkiSha256 } from "@zml/tdx";
import type { RoutingState } from "../fleet/routing-state.ts";
import type { AttestationGate } from "../node/attestation-gate.ts";

/** What the dispatcher knows about a node right now (memory reads). */
export interface SessionNodeView {
  node(nodeId: string): NodeSpec | undefined;
  /** `Active` with no probe pending, per the health aggregator. */
  active(nodeId: string): boolean;
  /** The node's current instance id, when its framework reports one. */
  instanceId(nodeId: string): string | null;
  verdict(nodeId: string, model: string, now: number): AttestationVerdict;
}

/** The fields of a routed request the session gate reads. */
export interface SessionRequest {
  sessionId: string | undefined;
  account: string;
  model: string;
  tier: number;
}

export type SessionCheck =
  | { ok: true; session: Session; node: NodeSpec }
  /** `end`: the session's node can no longer serve it; the session must be ended with this reason. */
  | { ok: false; error: ZmlError; session?: Session; end?: string };

const PARAM = "session_id";

/**
 * The gate of the session path. A session another account owns, for another model, or
 * deleted looks exactly like an unknown one (`session_not_found`): nothing leaks about
 * other accounts' sessions. An expired session answers `session_expired`. A node that left
 * the fleet, lost its usable attestation, is not `Active` or restarted (new instance id)
 * ends the session with `session_node_unavailable`: there is no failover to another node.
 */
export function checkSession(
  session: Session | undefined,
  request: SessionRequest,
  view: SessionNodeView,
  now: number,
): SessionCheck {
  const id = request.sessionId ?? "";
  if (
    session === undefined ||
    session.account !== request.account ||
    session.model !== request.model ||
    session.ended?.reason_code === "deleted"
  ) {
    return {
      ok: false,
      error: new ZmlError("session_not_found", `no session ${id}`, { param: PARAM }),
    };
  }
  if (session.ended !== null) {
    const ended = new Date(session.ended.at).toISOString();
    return {
      ok: false,
      session,
      error: unavailable(`session ${id} ended at ${ended}: ${session.ended.reason}`),
    };
  }
  if (!(now < session.expires_at)) {
    const at = new Date(session.expires_at).toISOString();
    return {
      ok: false,
      session,
      error: new ZmlError("session_expired", `session ${id} expired at ${at}`, { param: PARAM }),
    };
  }
  if (request.tier !== session.tier) {
    return {
      ok: false,
      session,
      error: new ZmlError(
        "invalid_request",
        `session ${id} is a tier ${session.tier} session; send tier ${session.tier} with session_id`,
        { param: "tier" },
      ),
    };
  }
  const why = nodeProblem(session, view, now);
  if (why !== undefined) {
    return {
      ok: false,
      session,
      end: why,
      error: unavailable(`session ${id} ended: ${why}`),
    };
  }
  return { ok: true, session, node: view.node(session.node_id)! };
}

function nodeProblem(session: Session, view: SessionNodeView, now: number): string | undefined {
  const nodeId = session.node_id;
  const node = view.node(nodeId);
  if (node === undefined || node.tier !== session.tier || !node.models.includes(session.model)) {
    return `node ${nodeId} no longer serves ${session.model} at tier ${session.tier}`;
  }
  const verdict = view.verdict(nodeId, session.model, now);
  if (!verdict.usable) return `node ${nodeId} attestation not usable: ${verdict.detail}`;
  if (!view.active(nodeId)) return `node ${nodeId} is not Active`;
  const instance = view.instanceId(nodeId);
  if (
    session.node_instance_id !== null &&
    instance !== null &&
    instance !== session.node_instance_id
  ) {
    return `node ${nodeId} restarted (its session key is gone)`;
  }
  return undefined;
}

function unavailable(message: string): ZmlError {
  return new ZmlError("session_node_unavailable", `${message}; open a new session`, {
    param: PARAM,
  });
}

/** The dispatcher's in-memory view of nodes, as {@link checkSession} reads it. */
export function sessionNodeView(
  routing: RoutingState,
  attestation: Pick<AttestationGate, "verdict">,
  states: ReadonlyMap<string, NodeState>,
): SessionNodeView {
  const { snapshot, live } = routing.current();
  return {
    node: (nodeId) => {
      const i = snapshot.nodeIndex.get(nodeId);
      return i === undefined ? undefined : snapshot.nodes[i]?.spec;
    },
    active: (nodeId) => {
      const i = snapshot.nodeIndex.get(nodeId);
      return i !== undefined && live.status[i] === LIVE_STATUS.active;
    },
    instanceId: (nodeId) => states.get(nodeId)?.instance_id ?? null,
    verdict: (nodeId, model, now) => attestation.verdict(nodeId, model, now),
  };
}

/** The `key_id` a session's sealed requests carry: SHA-256 of its key's SPKI DER. */
export function sessionKeyIdOf(session: Session): string {
  return spkiSha256(Buffer.from(session.attestation.session_public_key, "base64"));
}
