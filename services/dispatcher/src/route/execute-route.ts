import { randomUUID } from "node:crypto";
import { context, trace } from "@opentelemetry/api";
import { ZmlError } from "@zml/contracts";
import { lazyChild } from "@zml/telemetry";
import { runAttempts } from "./attempt-loop.ts";
import type { ExecuteDeps, Execution, ExecutionResult } from "./execution.ts";
import { createRouteReport } from "./route-report.ts";
import { runSessionRoute } from "./session-route.ts";
import { endRouteSpan, startRouteSpan } from "./tracing.ts";

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
      { param: "session_id" },
    );
    report.outcome(error.code);
    exec.writer.error(error.toBody());
    return { kind: "failed", error, attempts: 0 };
  }
  return runAttempts(deps, exec, decisionId, report);
}
