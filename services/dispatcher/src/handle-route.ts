import { randomUUID } from "node:crypto";
import { context, propagation } from "@opentelemetry/api";
import { createReplyWriter, extractTraceContext, publishJson } from "@zml/bus";
import type { Bus, Msg, ReplyWriter } from "@zml/bus";
import {
  NODE_COOLDOWN_SUBJECT,
  NodeCooldownSchema,
  NodeObservationSchema,
  ZmlError,
  nodeObservationSubject,
  serializeRoutingHeader,
} from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import {
  DEFAULT_POLICY_NAME,
  decide,
  nextAttempt,
  resolvePolicy,
  shouldCoolDown,
} from "@zml/routing";
import type { AttemptFailure, FailedAttempt, Rejection, ResolvedPolicy } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { CapacitySignal } from "./capacity-signal.ts";
import type { Cancellations } from "./cancellations.ts";
import type { DispatcherConfig } from "./config.ts";
import type { DispatcherMetrics } from "./metrics.ts";
import { withModel } from "./model-rewrite.ts";
import { callNode } from "./node-call.ts";
import type { AttemptOutcome } from "./node-call.ts";
import type { NodePools } from "./node-pools.ts";
import { readRouteRequest } from "./route-request.ts";
import type { RouteRequest } from "./route-request.ts";
import type { RoutingState } from "./routing-state.ts";

export interface RouteHandlerDeps {
  bus: Bus;
  routing: RoutingState;
  pools: NodePools;
  cancellations: Cancellations;
  capacity: CapacitySignal;
  /** Secrets by reference, for nodes whose spec names an `auth.secret_ref`. */
  secrets: ReadonlyMap<string, string>;
  config: Pick<
    DispatcherConfig,
    "DISPATCH_HEADERS_TIMEOUT_MS" | "DISPATCH_BODY_IDLE_TIMEOUT_MS" | "NODE_COOLDOWN_MS"
  >;
  log: Logger;
  metrics: DispatcherMetrics;
  clock: () => number;
  random: () => number;
}

/**
 * Handles one `route.request`: decides with the pure routing core, sends the client's bytes
 * to the chosen node, relays the answer, and retries or falls back within the attempt
 * budget while nothing has reached the client.
 */
export function createRouteHandler(deps: RouteHandlerDeps): (msg: Msg) => Promise<void> {
  return async (msg) => {
    if (!msg.reply) return; // a request nobody waits for
    const writer = createReplyWriter(deps.bus.nc, msg.reply);
    let request: RouteRequest;
    try {
      request = readRouteRequest(msg.headers, deps.clock());
    } catch (err) {
      writer.error(asZmlError(err).toBody());
      return;
    }
    const cancelled = deps.cancellations.register(msg.reply);
    try {
      await context.with(extractTraceContext(msg.headers), () =>
        route(deps, request, msg.data, writer, cancelled),
      );
    } finally {
      deps.cancellations.release(msg.reply);
    }
  };
}

async function route(
  deps: RouteHandlerDeps,
  request: RouteRequest,
  body: Uint8Array,
  writer: ReplyWriter,
  cancelled: AbortSignal,
): Promise<void> {
  const decisionId = randomUUID();
  const log = deps.log.child({ decision_id: decisionId, request_id: request.requestId });
  const resolved = resolveRequestPolicy(deps, request);
  if (!resolved.ok) {
    reject(deps, writer, log, resolved);
    return;
  }
  const policy = resolved.policy;
  const models = [request.model, ...request.fallbackModels];
  const failures: FailedAttempt[] = [];
  const queueUntil = { at: 0 };

  for (;;) {
    if (cancelled.aborted) return;
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
            tier: request.tier as 1 | 2 | 3 | 4,
            acceleratorHint: preferFamily ?? request.acceleratorHint,
            sort: request.sort,
            exclude,
            random: deps.random,
          },
          policy,
          now,
        ),
    });

    if (next.action === "stop") {
      const rejection = next.rejection;
      if (failures.length === 0 && rejection && rejection.queueForMs > 0) {
        // queue_on_saturation: wait for capacity (woken by state changes and completions),
        // never past the policy's max_queue_ms or the request's deadline.
        if (queueUntil.at === 0)
          queueUntil.at = Math.min(now + rejection.queueForMs, request.deadline);
        const woke = await deps.capacity.wait(queueUntil.at - deps.clock(), cancelled);
        if (woke) continue;
        deps.metrics.queueTimeouts.inc();
      }
      if (failures.length === 0 && rejection) {
        reject(deps, writer, log, rejection);
        return;
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
      return;
    }

    const { candidate, attempt, model } = next;
    const node = candidate.node;
    const routing = serializeRoutingHeader({
      decisionId,
      node: node.id,
      policy: policy.name,
      family: node.accelerator_family,
      queueDepth: Math.round(candidate.queueDepth),
      tier: node.tier,
      attempts: attempt,
    });
    if (attempt > 1)
      deps.metrics.retries.inc({ kind: model === request.model ? "retry" : "fallback" });

    live.dispatched(node.id);
    const startedAt = deps.clock();
    let outcome: AttemptOutcome;
    try {
      outcome = await callNode({
        pool: deps.pools.get(node),
        path: deps.pools.pathFor(node, request.path),
        body: model === request.model ? body : withModel(body, model),
        headers: nodeHeaders(deps, node, request.stream),
        stream: request.stream,
        signal: AbortSignal.any([
          cancelled,
          AbortSignal.timeout(Math.max(1, request.deadline - startedAt)),
        ]),
        headersTimeoutMs: deps.config.DISPATCH_HEADERS_TIMEOUT_MS,
        bodyIdleTimeoutMs: deps.config.DISPATCH_BODY_IDLE_TIMEOUT_MS,
        writer,
        routing,
        startedAt,
        clock: deps.clock,
      });
    } finally {
      deps.routing.current().live.completed(node.id);
      deps.capacity.notify();
    }
    const latencyMs = deps.clock() - startedAt;
    if (cancelled.aborted) {
      deps.metrics.decisions.inc({ outcome: "cancelled" });
      log.info({ node: node.id, attempts: attempt }, "client went away; node call aborted");
      return;
    }
    observe(deps, node, decisionId, outcome, latencyMs);

    if (outcome.kind !== "retryable") {
      // A 429 goes back to the client as is, but the node rests at least its Retry-After.
      if (outcome.kind === "relayed" && outcome.status === 429) {
        coolDown(deps, node, outcome.retryAfterS, "http_429");
      }
      deps.metrics.decisions.inc({ outcome: outcome.kind === "relayed" ? "routed" : "broken" });
      log.info(
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
      return;
    }
    const failure: AttemptFailure =
      outcome.status !== null
        ? { kind: "status", status: outcome.status }
        : { kind: outcome.outcome === "timeout" ? "timeout" : "network_error" };
    failures.push({ model, nodeId: node.id, family: node.accelerator_family, failure });
    if (shouldCoolDown(failure)) coolDown(deps, node, outcome.retryAfterS, outcome.error);
    log.warn({ node: node.id, attempt, error: outcome.error }, "attempt failed");
  }
}

function resolveRequestPolicy(
  deps: RouteHandlerDeps,
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
  deps: RouteHandlerDeps,
  writer: ReplyWriter,
  log: Logger,
  rejection: Rejection,
): void {
  deps.metrics.decisions.inc({ outcome: rejection.reason });
  if (rejection.code === "saturated" || rejection.code === "no_node_available") {
    deps.metrics.saturation.inc({ reason: rejection.reason });
  }
  log.info(
    { outcome: rejection.reason, passed_over: rejection.passedOver.length },
    "request not routed",
  );
  const param = rejection.reason === "unknown_policy" ? "policy" : "model";
  writer.error(
    new ZmlError(rejection.code, rejection.detail, param, rejection.retryAfterS).toBody(),
  );
}

function nodeHeaders(
  deps: RouteHandlerDeps,
  node: NodeSpec,
  stream: boolean,
): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: stream ? "text/event-stream" : "application/json",
  };
  if (node.auth) {
    const secret = deps.secrets.get(node.auth.secret_ref);
    if (secret)
      headers[node.auth.header.toLowerCase()] = node.auth.scheme
        ? `${node.auth.scheme} ${secret}`
        : secret;
  }
  propagation.inject(context.active(), headers);
  return headers;
}

/** Shares a cooldown with every dispatcher replica; a later error never shortens one. */
function coolDown(
  deps: RouteHandlerDeps,
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
  deps: RouteHandlerDeps,
  node: NodeSpec,
  decisionId: string,
  outcome: AttemptOutcome,
  latencyMs: number,
): void {
  const ok = outcome.kind === "relayed" && outcome.status < 500;
  if (ok) deps.routing.current().live.observeLatency(node.id, latencyMs);
  deps.metrics.attempts.inc({ node: node.id, outcome: outcome.kind });
  publishJson(deps.bus, nodeObservationSubject(node.id), NodeObservationSchema, {
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

function asZmlError(err: unknown): ZmlError {
  return err instanceof ZmlError ? err : new ZmlError("internal_error", "unexpected error");
}
