import { randomUUID } from "node:crypto";
import { context, propagation, trace } from "@opentelemetry/api";
import { publishJson } from "@zml/bus";
import type { Bus, ReplyWriter } from "@zml/bus";
import {
  isTeeTier,
  NODE_COOLDOWN_SUBJECT,
  NodeCooldownSchema,
  ZmlError,
  serializeRoutingHeader,
} from "@zml/contracts";
import type { NodeSpec, NodeState, Session } from "@zml/contracts";
import {
  DEFAULT_POLICY_NAME,
  decide,
  nextAttempt,
  resolvePolicy,
  shouldCoolDown,
} from "@zml/routing";
import type { AttemptFailure, FailedAttempt, Rejection, ResolvedPolicy } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { AttestationGate } from "./attestation-gate.ts";
import type { CapacitySignal } from "./capacity-signal.ts";
import type { DispatcherConfig } from "./config.ts";
import type { DispatcherMetrics } from "./metrics.ts";
import { attemptSignal } from "./attempt-signal.ts";
import type { ObservationBatcher } from "./observation-batcher.ts";
import { withModel } from "./model-rewrite.ts";
import { callNode } from "./node-call.ts";
import type { AttemptOutcome } from "./node-call.ts";
import type { NodePools } from "./node-pools.ts";
import type { RouteRequest } from "./route-request.ts";
import type { RoutingState } from "./routing-state.ts";
import { checkSession, sessionNodeView } from "./session-check.ts";
import type { SessionStore } from "./session-store.ts";
import {
  endAttemptSpan,
  endRouteSpan,
  recordDecision,
  startAttemptSpan,
  startQueueWaitSpan,
  startRouteSpan,
} from "./tracing.ts";

export interface ExecuteDeps {
  bus: Bus;
  routing: RoutingState;
  pools: NodePools;
  capacity: CapacitySignal;
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
  request: RouteRequest;
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
  const { request, writer, cancelled } = exec;
  // The logger's mixin adds trace and span ids; the decision id goes on every line too.
  const log = deps.log.child({ decision_id: decisionId, request_id: request.requestId });
  if (request.sessionId !== undefined) return runSessionRoute(deps, exec, decisionId, log);
  const resolved = resolveRequestPolicy(deps, request);
  if (!resolved.ok) return reject(deps, writer, log, resolved, null);
  const policy = resolved.policy;
  const models = [request.model, ...request.fallbackModels];
  const failures: FailedAttempt[] = [];
  let queueUntil = 0;

  for (;;) {
    if (cancelled.aborted) return { kind: "cancelled" };
    const now = deps.clock();
    const { snapshot, live } = deps.routing.current();
    const next = nextAttempt({
      models,
      failures,
      deadlineMs: request.deadline,
      now,
      route: (model, exclude, preferFamily) =>
        decide(
          snapshot,
          live,
          {
            model,
            tier: request.tier,
            acceleratorHint: preferFamily ?? request.acceleratorHint,
            sort: request.sort,
            exclude: withUnapproved(deps, exclude, model, request.tier, now),
            random: deps.random,
          },
          policy,
          now,
        ),
    });

    if (next.action === "stop") {
      const rejection = next.rejection;
      if (rejection) recordDecision(decisionId, policy, failures.length + 1, { rejection });
      if (failures.length === 0 && rejection) {
        if (exec.waitForCapacity && rejection.queueForMs > 0) {
          // queue_on_saturation: wait for capacity (woken by state changes and completions),
          // never past the policy's max_queue_ms or the request's deadline.
          if (queueUntil === 0) queueUntil = Math.min(now + rejection.queueForMs, request.deadline);
          const waitSpan = startQueueWaitSpan();
          const woke = await deps.capacity.wait(queueUntil - deps.clock(), cancelled);
          waitSpan.setAttribute("zml.queue.woken", woke);
          waitSpan.end();
          if (woke) continue;
          deps.metrics.queueTimeouts.inc();
        }
        return reject(deps, writer, log, rejection, policy);
      }
      const last = failures.at(-1);
      const error =
        next.reason === "deadline_exceeded"
          ? new ZmlError("gateway_timeout", "request deadline passed before an attempt succeeded")
          : new ZmlError(
              "upstream_unavailable",
              `${failures.length} attempt(s) failed; last: ${last ? `${last.nodeId} ${describe(last.failure)}` : "none"}`,
            );
      deps.metrics.decisions.inc({ outcome: next.reason });
      log.warn({ outcome: next.reason, attempts: failures.length }, "request failed");
      writer.error(error.toBody());
      return { kind: "failed", error, attempts: failures.length };
    }

    const { candidate, attempt, model } = next;
    const node = candidate.node;
    recordDecision(decisionId, policy, attempt, { decision: next.decision });
    if (isTeeTier(node.tier)) {
      // Defence in depth: the decision already required a usable attestation.
      const verdict = deps.attestation.verdict(node.id, model, now);
      if (!verdict.usable) {
        const error = new ZmlError(
          "no_node_available",
          `attestation not usable: ${verdict.detail}`,
        );
        log.error({ node: node.id, reason: verdict.reason }, "attestation gate refused a dispatch");
        writer.error(error.toBody());
        return { kind: "failed", error, attempts: failures.length };
      }
    }
    const routing = serializeRoutingHeader({
      decisionId,
      node: node.id,
      policy: policy.name,
      family: node.accelerator_family,
      queueDepth: Math.round(candidate.queueDepth),
      tier: node.tier,
      attempts: attempt,
    });
    if (attempt > 1) {
      deps.metrics.retries.inc({ kind: model === request.model ? "retry" : "fallback" });
    }

    const kind = attempt === 1 ? "first" : model === request.model ? "retry" : "fallback";
    const plan = { node, model, attempt, kind, routing } as const;
    const { outcome, latencyMs } = await dispatchAttempt(deps, exec, plan);
    if (cancelled.aborted) {
      deps.metrics.decisions.inc({ outcome: "cancelled" });
      log.info({ node: node.id, attempts: attempt }, "client went away; node call aborted");
      return { kind: "cancelled" };
    }
    observe(deps, node, decisionId, outcome, latencyMs);

    if (outcome.kind !== "retryable") {
      // A 429 goes back to the client as is, but the node rests at least its Retry-After.
      if (outcome.kind === "relayed" && outcome.status === 429) {
        coolDown(deps, node, outcome.retryAfterS, "http_429");
      }
      deps.metrics.decisions.inc({ outcome: outcome.kind === "relayed" ? "routed" : "broken" });
      // Intake logs one info line per request with its decision id; here the detail is debug,
      // unless the stream broke.
      log[outcome.kind === "relayed" ? "debug" : "warn"](
        {
          node: node.id,
          family: node.accelerator_family,
          model,
          policy: policy.name,
          status: outcome.status,
          attempts: attempt,
          queue_depth: candidate.queueDepth,
          latency_ms: latencyMs,
        },
        outcome.kind === "relayed" ? "request routed" : "stream broke after first byte",
      );
      return { kind: outcome.kind, status: outcome.status, attempts: attempt, routing };
    }
    const failure = failureOf(outcome);
    failures.push({ model, nodeId: node.id, family: node.accelerator_family, failure });
    if (shouldCoolDown(failure)) coolDown(deps, node, outcome.retryAfterS, outcome.error);
    log.warn({ node: node.id, attempt, error: outcome.error }, "attempt failed");
  }
}

interface AttemptPlan {
  node: NodeSpec;
  model: string;
  attempt: number;
  kind: "first" | "retry" | "fallback";
  routing: string;
}

/** Sends the payload to one node and relays its answer; the caller judges the outcome. */
async function dispatchAttempt(
  deps: ExecuteDeps,
  exec: Execution,
  plan: AttemptPlan,
): Promise<{ outcome: AttemptOutcome; latencyMs: number }> {
  const { request, cancelled } = exec;
  const { node, model, attempt } = plan;
  const path = deps.pools.pathFor(node, request.path);
  const attemptSpan = startAttemptSpan(node, path, attempt, plan.kind, model);
  // The node receives `traceparent` of its attempt span.
  const headers = context.with(trace.setSpan(context.active(), attemptSpan), () =>
    nodeHeaders(deps, node, request.stream),
  );
  deps.routing.current().live.dispatched(node.id);
  if (attempt === 1) exec.onDispatched?.();
  const startedAt = deps.clock();
  let outcome: AttemptOutcome;
  const abort = attemptSignal(cancelled, request.deadline - startedAt);
  try {
    outcome = await callNode({
      pool: deps.pools.get(node),
      path,
      body: model === request.model ? exec.body : withModel(exec.body, model),
      headers,
      stream: request.stream,
      signal: abort.signal,
      headersTimeoutMs: deps.config.DISPATCH_HEADERS_TIMEOUT_MS,
      bodyIdleTimeoutMs: deps.config.DISPATCH_BODY_IDLE_TIMEOUT_MS,
      maxAnswerBytes: deps.config.DISPATCH_MAX_ANSWER_BYTES,
      writer: exec.writer,
      routing: plan.routing,
      startedAt,
      clock: deps.clock,
    });
  } finally {
    abort.dispose();
    deps.routing.current().live.completed(node.id);
    deps.capacity.notify();
  }
  endAttemptSpan(attemptSpan, outcome.status, outcome.kind === "relayed" ? null : outcome.error);
  return { outcome, latencyMs: deps.clock() - startedAt };
}

function failureOf(outcome: AttemptOutcome & { kind: "retryable" }): AttemptFailure {
  return outcome.status !== null
    ? { kind: "status", status: outcome.status }
    : { kind: outcome.outcome === "timeout" ? "timeout" : "network_error" };
}

/**
 * A request of a tier-4 session: one attempt on the session's node and never on another
 * (the node's ephemeral session key lives only there). When the node cannot take it or the
 * attempt fails (5xx, network error, timeout), the session ends and the client gets
 * `session_node_unavailable`; no other node ever sees the payload.
 */
async function runSessionRoute(
  deps: ExecuteDeps,
  exec: Execution,
  decisionId: string,
  log: Logger,
): Promise<ExecutionResult> {
  const { request, writer, cancelled } = exec;
  const sessionId = request.sessionId!;
  trace.getActiveSpan()?.setAttribute("zml.session_id", sessionId);
  const found = await deps.sessions.lookup(sessionId);
  if (cancelled.aborted) return { kind: "cancelled" };
  const view = sessionNodeView(deps.routing, deps.attestation, deps.states);
  const check = checkSession(found, request, view, deps.clock());
  if (!check.ok) {
    if (check.end !== undefined && check.session) {
      await endSession(deps, log, check.session, check.end);
    }
    deps.metrics.decisions.inc({ outcome: check.error.code });
    log.info({ session: sessionId, outcome: check.error.code }, "session request refused");
    writer.error(check.error.toBody());
    return { kind: "failed", error: check.error, attempts: 0 };
  }
  const { session, node } = check;
  const routing = serializeRoutingHeader({
    decisionId,
    node: node.id,
    policy: session.policy,
    family: node.accelerator_family,
    queueDepth: Math.round(deps.routing.current().live.queueDepth(node.id) ?? 0),
    tier: node.tier,
    attempts: 1,
  });
  const plan = { node, model: session.model, attempt: 1, kind: "first", routing } as const;
  const { outcome, latencyMs } = await dispatchAttempt(deps, exec, plan);
  if (cancelled.aborted) {
    deps.metrics.decisions.inc({ outcome: "cancelled" });
    return { kind: "cancelled" };
  }
  observe(deps, node, decisionId, outcome, latencyMs);
  if (outcome.kind === "relayed") {
    if (outcome.status === 429) coolDown(deps, node, outcome.retryAfterS, "http_429");
    deps.metrics.decisions.inc({ outcome: "session_routed" });
    log.info(
      { session: sessionId, node: node.id, status: outcome.status, latency_ms: latencyMs },
      "session request routed",
    );
    return { kind: "relayed", status: outcome.status, attempts: 1, routing };
  }
  if (outcome.kind === "retryable" && shouldCoolDown(failureOf(outcome))) {
    coolDown(deps, node, outcome.retryAfterS, outcome.error);
  }
  await endSession(deps, log, session, `node ${node.id} failed: ${outcome.error}`);
  if (outcome.kind === "broken") {
    // The client already got the stream's explicit error frame.
    deps.metrics.decisions.inc({ outcome: "broken" });
    return { kind: "broken", status: outcome.status, attempts: 1, routing };
  }
  const error = new ZmlError(
    "session_node_unavailable",
    `session ${sessionId} ended: node ${node.id} failed (${outcome.error}); open a new session`,
    "session_id",
  );
  deps.metrics.decisions.inc({ outcome: error.code });
  writer.error(error.toBody(), routing);
  return { kind: "failed", error, attempts: 1 };
}

/** Records that the session's node can no longer serve it, so later requests are refused. */
async function endSession(
  deps: ExecuteDeps,
  log: Logger,
  session: Session,
  why: string,
): Promise<void> {
  deps.metrics.sessions.inc({ outcome: "node_unavailable" });
  log.warn({ session: session.session_id, node: session.node_id, reason: why }, "session ended");
  try {
    await deps.sessions.end(session, "node_unavailable", why, deps.clock());
  } catch (err) {
    log.error({ session: session.session_id, err: String(err) }, "session end not recorded");
  }
}

/** For tier 3/4, nodes whose attestation does not cover the model are never candidates. */
function withUnapproved(
  deps: ExecuteDeps,
  exclude: ReadonlySet<string>,
  model: string,
  tier: number,
  now: number,
): ReadonlySet<string> {
  if (!isTeeTier(tier)) return exclude;
  const unapproved = deps.attestation.notApprovedFor(model, tier, now);
  return unapproved.size === 0 ? exclude : new Set([...exclude, ...unapproved]);
}

function resolveRequestPolicy(
  deps: ExecuteDeps,
  request: RouteRequest,
): { ok: true; policy: ResolvedPolicy } | Rejection {
  const { snapshot } = deps.routing.current();
  // Intake names the built-in default when nothing else applies; it is not a registered policy.
  const named =
    request.policy === DEFAULT_POLICY_NAME && !snapshot.policies.has(request.policy)
      ? undefined
      : request.policy;
  return resolvePolicy(snapshot, { policy: named, model: request.model });
}

function reject(
  deps: ExecuteDeps,
  writer: ReplyWriter,
  log: Logger,
  rejection: Rejection,
  policy: ResolvedPolicy | null,
): ExecutionResult {
  deps.metrics.decisions.inc({ outcome: rejection.reason });
  const saturated = rejection.code === "saturated";
  if (saturated || rejection.code === "no_node_available") {
    deps.metrics.saturation.inc({ reason: rejection.reason });
  }
  log.info(
    { outcome: rejection.reason, passed_over: rejection.passedOver.length },
    "request not routed",
  );
  const param = rejection.reason === "unknown_policy" ? "policy" : "model";
  const error = new ZmlError(rejection.code, rejection.detail, param, rejection.retryAfterS);
  writer.error(error.toBody());
  return { kind: "rejected", error, saturated, policy };
}

function nodeHeaders(deps: ExecuteDeps, node: NodeSpec, stream: boolean): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: stream ? "text/event-stream" : "application/json",
  };
  if (node.auth) {
    const secret = deps.secrets.get(node.auth.secret_ref);
    if (secret) {
      headers[node.auth.header.toLowerCase()] = node.auth.scheme
        ? `${node.auth.scheme} ${secret}`
        : secret;
    }
  }
  propagation.inject(context.active(), headers);
  return headers;
}

/** Shares a cooldown with every dispatcher replica; a later error never shortens one. */
function coolDown(
  deps: ExecuteDeps,
  node: NodeSpec,
  retryAfterS: number | null,
  reason: string,
): void {
  const until = deps.clock() + Math.max(deps.config.NODE_COOLDOWN_MS, (retryAfterS ?? 0) * 1000);
  deps.routing.current().live.coolDown(node.id, until);
  deps.metrics.cooldowns.inc({ node: node.id });
  publishJson(deps.bus, NODE_COOLDOWN_SUBJECT, NodeCooldownSchema, {
    type: "node.cooldown.v1",
    node_id: node.id,
    until,
    reason: reason.slice(0, 64),
  });
}

function observe(
  deps: ExecuteDeps,
  node: NodeSpec,
  decisionId: string,
  outcome: AttemptOutcome,
  latencyMs: number,
): void {
  if (outcome.kind === "relayed" && outcome.status < 500) {
    deps.routing.current().live.observeLatency(node.id, latencyMs);
  }
  deps.metrics.attempts.inc({ node: node.id, outcome: outcome.kind });
  deps.observations.add({
    type: "node.observation.v1",
    node_id: node.id,
    decision_id: decisionId,
    outcome:
      outcome.kind === "retryable"
        ? outcome.outcome
        : outcome.kind === "broken"
          ? "network_error"
          : "ok",
    status: outcome.status,
    latency_ms: latencyMs,
    ttft_ms: outcome.kind === "retryable" ? null : outcome.ttftMs,
    at: deps.clock(),
  });
}

function describe(failure: AttemptFailure): string {
  return failure.kind === "status" ? `answered ${failure.status}` : failure.kind;
}
