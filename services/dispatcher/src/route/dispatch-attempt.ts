// One attempt: the client's bytes to one node, its answer relayed to the writer. The caller
// judges the outcome (retry, fall back, or done).
import { context, propagation, trace } from "@opentelemetry/api";
import {
  ROUTING_HTTP_HEADER,
  SEALED_REQUEST_MEDIA_TYPE,
  SEALED_RESPONSE_MEDIA_TYPE,
} from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import type { AttemptFailure } from "@zml/routing";
import { callNode } from "../node/node-call.ts";
import type { AttemptOutcome } from "../node/node-call.ts";
import { attemptSignal } from "./attempt-signal.ts";
import type { ExecuteDeps, Execution } from "./execution.ts";
import { withModel } from "./model-rewrite.ts";
import { endAttemptSpan, startAttemptSpan } from "./tracing.ts";

export interface AttemptPlan {
  node: NodeSpec;
  model: string;
  attempt: number;
  kind: "first" | "retry" | "fallback";
  /** The routing header the node's request and the answer carry. */
  routing: string;
  /** How long the node has to start answering; `DISPATCH_HEADERS_TIMEOUT_MS` when absent. */
  firstByteMs?: number;
  /** The body is a sealed tier-4 envelope for the node's TD proxy (session requests). */
  sealed?: boolean;
}

/**
 * Sends the payload to one node and relays its answer. The node's in-flight count covers
 * exactly the call, so concurrent decisions see it at once; capacity waiters are woken when
 * the call ends.
 */
export async function dispatchAttempt(
  deps: ExecuteDeps,
  exec: Execution,
  plan: AttemptPlan,
): Promise<{ outcome: AttemptOutcome; latencyMs: number }> {
  const { request, cancelled } = exec;
  const { node, model, attempt } = plan;
  const path = deps.pools.pathFor(node, request.path);
  const attemptSpan = startAttemptSpan(node, path, attempt, plan.kind, model);
  // The node receives `traceparent` of its attempt span, and the routing header the answer
  // will carry, for the serving framework to log (seed step 4).
  const headers = context.with(trace.setSpan(context.active(), attemptSpan), () =>
    nodeHeaders(deps.secrets, node, request.stream, plan.routing, plan.sealed === true),
  );
  deps.routing.current().live.dispatched(node.id);
  deps.inFlightShare?.changed();
  if (attempt === 1) exec.onDispatched?.();
  const startedAt = deps.clock();
  let outcome: AttemptOutcome;
  const abort = attemptSignal(cancelled, {
    firstByteMs: plan.firstByteMs ?? deps.config.DISPATCH_HEADERS_TIMEOUT_MS,
    deadline: request.deadline,
    clock: deps.clock,
  });
  try {
    outcome = await callNode({
      pool: deps.pools.get(node),
      path,
      body: model === request.model ? exec.body : withModel(exec.body, model),
      headers,
      stream: request.stream,
      sealed: plan.sealed === true,
      api: request.api,
      signal: abort.signal,
      onFirstByte: abort.firstByteArrived,
      bodyIdleTimeoutMs: deps.config.DISPATCH_BODY_IDLE_TIMEOUT_MS,
      maxAnswerBytes: deps.config.DISPATCH_MAX_ANSWER_BYTES,
      writer: exec.writer,
      routing: plan.routing,
      startedAt,
      clock: deps.clock,
    });
  } finally {
    abort.dispose();
    deps.routing.current().live.completed(node.id, deps.clock());
    deps.inFlightShare?.changed();
    deps.capacity.notify();
  }
  endAttemptSpan(attemptSpan, outcome.status, outcome.kind === "relayed" ? null : outcome.error);
  return { outcome, latencyMs: deps.clock() - startedAt };
}

/**
 * A retryable outcome as the routing core's attempt failure, by how it failed: a body that
 * broke or stalled after its status line is a network failure or a timeout, whatever that
 * status said (a 200 whose body never arrived is no answer).
 */
export function failureOf(outcome: AttemptOutcome & { kind: "retryable" }): AttemptFailure {
  if (outcome.outcome === "timeout") return { kind: "timeout" };
  if (outcome.outcome === "network_error" || outcome.status === null) {
    return { kind: "network_error" };
  }
  if (outcome.outcome === "auth_failed") return { kind: "upstream_auth", status: outcome.status };
  if (outcome.outcome === "bad_response") return { kind: "bad_response", status: outcome.status };
  return { kind: "status", status: outcome.status };
}

function nodeHeaders(
  secrets: ReadonlyMap<string, string>,
  node: NodeSpec,
  stream: boolean,
  routing: string,
  sealed: boolean,
): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": sealed ? SEALED_REQUEST_MEDIA_TYPE : "application/json",
    accept: stream ? "text/event-stream" : sealed ? SEALED_RESPONSE_MEDIA_TYPE : "application/json",
    [ROUTING_HTTP_HEADER]: routing,
  };
  if (node.auth) {
    const secret = secrets.get(node.auth.secret_ref);
    if (secret) {
      headers[node.auth.header.toLowerCase()] = node.auth.scheme
        ? `${node.auth.scheme} ${secret}`
        : secret;
    }
  }
  propagation.inject(context.active(), headers);
  return headers;
}
