// A request of a tier-4 session: one attempt on the session's node and never on another.
import { trace } from "@opentelemetry/api";
import { serializeRoutingHeader, ZmlError } from "@zml/contracts";
import type { Session } from "@zml/contracts";
import { shouldCoolDown } from "@zml/routing";
import { checkSession, sessionKeyIdOf, sessionNodeView } from "../session/session-check.ts";
import { dispatchAttempt, failureOf } from "./dispatch-attempt.ts";
import type { ExecuteDeps } from "./execution.ts";
import type { RoutePath, RouteReport } from "./route-report.ts";

/**
 * The node's ephemeral session key lives only on the session's node, so nothing is retried
 * elsewhere. When the node cannot take the request or the attempt fails (5xx, network
 * error, timeout), the session ends and the client gets `session_node_unavailable`; no other
 * node ever sees the payload.
 */
export const runSessionRoute: RoutePath = async (deps, exec, decisionId, report) => {
  const { request, writer, cancelled } = exec;
  const { log } = report;
  const sessionId = request.sessionId!;
  trace.getActiveSpan()?.setAttribute("zml.session_id", sessionId);
  const found = await deps.sessions.lookup(sessionId);
  if (cancelled.aborted) return { kind: "cancelled" };
  const view = sessionNodeView(deps.routing, deps.attestation, deps.states);
  const check = checkSession(found, request, view, deps.clock());
  if (!check.ok) {
    if (check.end !== undefined && check.session) {
      await endSession(deps, report, check.session, check.end);
    }
    report.outcome(check.error.code);
    log.info({ session: sessionId, outcome: check.error.code }, "session request refused");
    writer.error(check.error.toBody());
    return { kind: "failed", error: check.error, attempts: 0 };
  }
  const { session, node } = check;
  const sealing = sealingProblem(request.sealedKeyId, session);
  if (sealing !== undefined) {
    report.outcome(sealing.code);
    log.info({ session: sessionId, outcome: sealing.code }, "session request refused");
    writer.error(sealing.toBody());
    return { kind: "failed", error: sealing, attempts: 0 };
  }
  const routing = serializeRoutingHeader({
    decisionId,
    node: node.id,
    policy: session.policy,
    family: node.accelerator_family,
    queueDepth: Math.round(deps.routing.current().live.queueDepth(node.id) ?? 0),
    tier: node.tier,
    attempts: 1,
  });
  const plan = {
    node,
    model: session.model,
    attempt: 1,
    kind: "first",
    routing,
    sealed: true,
  } as const;
  const { outcome, latencyMs } = await dispatchAttempt(deps, exec, plan);
  if (cancelled.aborted) {
    report.outcome("cancelled");
    return { kind: "cancelled" };
  }
  report.attempted(node, outcome, latencyMs);
  if (outcome.kind === "relayed") {
    if (outcome.status === 429) report.coolDown(node, outcome.retryAfterS, "http_429");
    report.outcome("session_routed");
    log.info(
      { session: sessionId, node: node.id, status: outcome.status, latency_ms: latencyMs },
      "session request routed",
    );
    return { kind: "relayed", status: outcome.status, attempts: 1, routing };
  }
  if (outcome.kind === "retryable" && shouldCoolDown(failureOf(outcome))) {
    report.coolDown(node, outcome.retryAfterS, outcome.error);
  }
  await endSession(deps, report, session, `node ${node.id} failed: ${outcome.error}`);
  if (outcome.kind === "broken") {
    // The client already got the stream's explicit error frame.
    report.outcome("broken");
    return { kind: "broken", status: outcome.status, attempts: 1, routing };
  }
  const error = new ZmlError(
    "session_node_unavailable",
    `session ${sessionId} ended: node ${node.id} failed (${outcome.error}); open a new session`,
    { param: "session_id" },
  );
  report.outcome(error.code);
  writer.error(error.toBody(), routing);
  return { kind: "failed", error, attempts: 1 };
};

/**
 * Why a session request may not go to the TD, if it may not: a session's requests are sealed
 * (intake refuses clear ones; this holds against a forged route request too), and sealed to
 * this session's key, so no request meant for another session reaches this node's key.
 */
function sealingProblem(keyId: string | undefined, session: Session): ZmlError | undefined {
  if (keyId === undefined) {
    return new ZmlError("sealed_body_required", "a session's requests are sealed to its key", {
      param: "session_id",
    });
  }
  if (keyId !== sessionKeyIdOf(session)) {
    return new ZmlError(
      "sealed_key_mismatch",
      `the request is sealed to another key than session ${session.session_id}'s`,
      { param: "key_id" },
    );
  }
  return undefined;
}

/** Records that the session's node can no longer serve it, so later requests are refused. */
async function endSession(
  deps: ExecuteDeps,
  report: RouteReport,
  session: Session,
  why: string,
): Promise<void> {
  deps.metrics.sessions.inc({ outcome: "node_unavailable" });
  report.log.warn(
    { session: session.session_id, node: session.node_id, reason: why },
    "session ended",
  );
  try {
    await deps.sessions.end(session, "node_unavailable", why, deps.clock());
  } catch (err) {
    report.log.error({ session: session.session_id, err: String(err) }, "session end not recorded");
  }
}
