// The one port through which the route path reports: metrics, the shared cooldown, the
// live table's latency, observations for the health aggregator, and the request's log.
// Spans are opened and closed by the code they time (see `tracing.ts`).
import { ERROR_CODES, ZmlError } from "@zml/contracts";
import type { NodeObservation, NodeSpec } from "@zml/contracts";
import type { Rejection, ResolvedPolicy } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import { cooldownMs, shareCooldown } from "../node/cooldowns.ts";
import type { AttemptOutcome } from "../node/node-call.ts";
import type { ExecuteDeps, Execution, ExecutionResult } from "./execution.ts";

type ReportDeps = Pick<
  ExecuteDeps,
  "bus" | "routing" | "observations" | "metrics" | "config" | "clock"
>;

/**
 * One way through the route path (the attempt loop, or a session's single attempt): writes
 * the answer to `exec.writer` and reports through `report`.
 */
export type RoutePath = (
  deps: ExecuteDeps,
  exec: Execution,
  decisionId: string,
  report: RouteReport,
) => Promise<ExecutionResult>;

/** Reporting for one request (one decision id). */
export interface RouteReport {
  readonly log: Logger;
  /** Counts how the request ended (`zml_dispatcher_decisions_total{outcome}`). */
  outcome(label: string): void;
  /** The answer of one node call: latency for ranking, attempt metrics, an observation. */
  attempted(node: NodeSpec, outcome: AttemptOutcome, latencyMs: number): void;
  /** Rests a node on every dispatcher replica; a later error never shortens a cooldown. */
  coolDown(node: NodeSpec, retryAfterS: number | null, reason: string): void;
  /** Counts, logs and builds the answer for a request no node can take. */
  rejected(
    rejection: Rejection,
    policy: ResolvedPolicy | null,
  ): ExecutionResult & {
    kind: "rejected";
  };
}

export function createRouteReport(deps: ReportDeps, decisionId: string, log: Logger): RouteReport {
  /** An answer the gateway would not relay: counted, and told to the operator who can fix it. */
  const refused = (node: NodeSpec, outcome: AttemptOutcome & { kind: "retryable" }) => {
    if (outcome.outcome === "auth_failed") {
      deps.metrics.refusedAnswers.inc({ node: node.id, code: "upstream_auth_failed" });
      // The gateway's credential for the node is wrong or missing: only its operator can act.
      // The node's message (bounded; the request's body is never logged) says which.
      log.error(
        { node: node.id, status: outcome.status, node_message: outcome.nodeMessage ?? null },
        "node refused the gateway's credential",
      );
    } else if (outcome.outcome === "bad_response") {
      deps.metrics.refusedAnswers.inc({ node: node.id, code: "bad_upstream_response" });
    } else if (outcome.addressRefused !== undefined) {
      deps.metrics.refusedAddresses.inc({ node: node.id, rule: outcome.addressRefused });
      // The node's name resolves (or was re-pointed) where no node may be: only the
      // operator can fix its endpoint or the allowance, and nothing went to it.
      log.error(
        { node: node.id, rule: outcome.addressRefused, error: outcome.error },
        "node address refused by the node address policy",
      );
    }
  };
  return {
    log,
    outcome: (label) => deps.metrics.decisions.inc({ outcome: label }),

    attempted(node, outcome, latencyMs) {
      if (outcome.kind === "relayed" && outcome.status < 500) {
        deps.routing.current().live.observeLatency(node.id, latencyMs);
      }
      deps.metrics.attempts.inc({ node: node.id, outcome: outcome.kind });
      if (outcome.kind === "retryable") refused(node, outcome);
      deps.observations.add({
        type: "node.observation.v1",
        node_id: node.id,
        decision_id: decisionId,
        outcome: observed(outcome),
        status: outcome.status,
        latency_ms: latencyMs,
        ttft_ms: outcome.kind === "retryable" ? null : outcome.ttftMs,
        at: deps.clock(),
      });
    },

    coolDown(node, retryAfterS, reason) {
      deps.metrics.cooldowns.inc({ node: node.id });
      shareCooldown(deps, node.id, cooldownMs(deps.config.NODE_COOLDOWN_MS, retryAfterS), reason);
    },

    rejected(rejection, policy) {
      deps.metrics.decisions.inc({ outcome: rejection.reason });
      const saturated = rejection.code === "saturated";
      if (
        saturated ||
        rejection.code === "no_node_available" ||
        rejection.code === "no_usable_node"
      ) {
        deps.metrics.saturation.inc({ reason: rejection.reason });
      }
      log.info(
        { outcome: rejection.reason, saturation: rejection.saturation },
        "request not routed",
      );
      const param = rejection.reason === "unknown_policy" ? "policy" : "model";
      // A 503 tells the caller why (the counts) and when to come back.
      const unavailable = ERROR_CODES[rejection.code].status === 503;
      const error = new ZmlError(rejection.code, rejection.detail, {
        param,
        retryAfterS: rejection.retryAfterS,
        saturation: unavailable ? rejection.saturation : undefined,
      });
      return { kind: "rejected", error, saturated, policy };
    },
  };
}

/**
 * An attempt as the health aggregator's observation. Refused answers are HTTP answers:
 * the status says what the node sent (a 401/403 is no sign of an unhealthy node).
 */
function observed(outcome: AttemptOutcome): NodeObservation["outcome"] {
  if (outcome.kind === "relayed") return "ok";
  if (outcome.kind === "broken") return "network_error";
  return outcome.outcome === "auth_failed" || outcome.outcome === "bad_response"
    ? "http_error"
    : outcome.outcome;
}
