import { randomUUID } from "node:crypto";
import { context, trace } from "@opentelemetry/api";
import type { Bus, ReplyWriter } from "@zml/bus";
import { ZmlError } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import type { ResolvedPolicy } from "@zml/routing";
import { lazyChild } from "@zml/telemetry";
import type { Logger } from "@zml/telemetry";
import type { AttestationGate } from "./attestation-gate.ts";
import type { CapacitySignal } from "./capacity-signal.ts";
import type { DispatcherConfig } from "./config.ts";
import type { InFlightShare } from "./in-flight-share.ts";
import type { DispatcherMetrics } from "./metrics.ts";
import type { NodePools } from "./node-pools.ts";
import type { ObservationBatcher } from "./observation-batcher.ts";
import { runAttempts } from "./route/attempt-loop.ts";
import { createRouteReport } from "./route/route-report.ts";
import { runSessionRoute } from "./route/session-route.ts";
import type { RoutedRequest } from "./route-headers.ts";
import type { RoutingState } from "./routing-state.ts";
import type { SessionStore } from "./session-store.ts";
import { endRouteSpan, startRouteSpan } from "./tracing.ts";

export interface ExecuteDeps {
  bus: Bus;
  routing: RoutingState;
  pools: NodePools;
  capacity: CapacitySignal;
  /** Tells the other replicas of each dispatch and completion; absent when alone. */
  inFlightShare?: InFlightShare;
  attestation: AttestationGate;
  /** Dispatch outcomes for the health aggregator, sent in per-node batches. */
  observations: ObservationBatcher;
  /** Tier-4 sessions: a request with a session id goes to its session's node only. */
  sessions: SessionStore;
  /** Latest node states (a session node's instance id). */
  states: ReadonlyMap<string, NodeState>;
  /** Secrets by reference, for nodes whose spec names an `auth.secret_ref`. */
  secrets: ReadonlyMap<string, string>;
  config: Pick<
    DispatcherConfig,
    | "DISPATCH_HEADERS_TIMEOUT_MS"
    | "DISPATCH_BODY_IDLE_TIMEOUT_MS"
    | "DISPATCH_MAX_ANSWER_BYTES"
    | "NODE_COOLDOWN_MS"
  >;
  log: Logger;
  metrics: DispatcherMetrics;
  clock: () => number;
  random: () => number;
}

export interface Execution {
  request: RoutedRequest;
  body: Uint8Array;
  writer: ReplyWriter;
  cancelled: AbortSignal;
  /**
   * Whether a saturated fleet is waited out here, per the policy's `queue_on_saturation`
   * (sync requests), or reported at once so the caller can wait elsewhere (batch jobs wait
   * in JetStream).
   */
  waitForCapacity: boolean;
  /** Called when the first attempt's payload is about to go to a node. */
  onDispatched?: () => void;
  /** Names the trace span for a batch job instead of a sync request. */
  batchJob?: boolean;
}

/** How a request ended. Every outcome except `cancelled` has been written to the writer. */
export type ExecutionResult =
  | { kind: "relayed" | "broken"; status: number; attempts: number; routing: string }
  | { kind: "rejected"; error: ZmlError; saturated: boolean; policy: ResolvedPolicy | null }
  | { kind: "failed"; error: ZmlError; attempts: number }
  | { kind: "cancelled" };

/**
 * Routes one request: decides with the pure routing core, sends the client's bytes to the
 * chosen node, relays the answer to the writer, and retries or falls back within the
 * attempt budget while nothing has reached the client.
 */
export async function executeRoute(deps: ExecuteDeps, exec: Execution): Promise<ExecutionResult> {
  const decisionId = randomUUID();
  const span = startRouteSpan(exec.request, decisionId, exec.batchJob ?? false);
  const result = await context.with(trace.setSpan(context.active(), span), () =>
    runRoute(deps, exec, decisionId),
  );
  const error = "error" in result ? result.error.code : result.kind === "broken" ? "broken" : null;
  endRouteSpan(
    span,
    {
      "zml.outcome": result.kind,
      ...("attempts" in result ? { "zml.attempts": result.attempts } : {}),
      ...("status" in result ? { "http.response.status_code": result.status } : {}),
    },
    error,
  );
  return result;
}

async function runRoute(
  deps: ExecuteDeps,
  exec: Execution,
  decisionId: string,
): Promise<ExecutionResult> {
  // The logger's mixin adds trace and span ids; the decision id goes on every line too.
  // Built only when a line is written: most requests log nothing at the default level.
  const log = lazyChild(deps.log, { decision_id: decisionId, request_id: exec.request.requestId });
  const report = createRouteReport(deps, decisionId, log);
  if (exec.request.sessionId !== undefined) return runSessionRoute(deps, exec, decisionId, report);
  if (exec.request.tier === 4) {
    // Intake refuses these; a forged route request must not get a clear tier-4 payload
    // through either.
    const error = new ZmlError(
      "sealed_body_required",
      "tier-4 requests belong to a session and are sealed to its key",
      "session_id",
    );
    report.outcome(error.code);
    exec.writer.error(error.toBody());
    return { kind: "failed", error, attempts: 0 };
  }
  return runAttempts(deps, exec, decisionId, report);
}
