import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { Attributes, Span } from "@opentelemetry/api";
import type { NodeSpec } from "@zml/contracts";
import type { Decision, PassedOver, Rejection, ResolvedPolicy } from "@zml/routing";
import type { RoutedRequest } from "./route-headers.ts";

/**
 * Spans of the routing path. Attribute names follow the OpenTelemetry semantic conventions
 * where they exist (messaging, HTTP, GenAI) and are prefixed `zml.` otherwise. Nothing from
 * the request or response body (prompts, completions) and no credential ever goes here.
 */
const tracer = trace.getTracer("zml-dispatcher");

/** At most this many passed-over candidates are recorded as events, to bound span size. */
const MAX_PASSED_OVER_EVENTS = 32;

export function startRouteSpan(
  request: RoutedRequest,
  decisionId: string,
  batchJob: boolean,
): Span {
  return tracer.startSpan(batchJob ? "zml.batch.job" : "zml.route.request process", {
    kind: SpanKind.CONSUMER,
    attributes: {
      "messaging.system": "nats",
      "messaging.operation.type": "process",
      "messaging.destination.name": batchJob ? "zml.jobs.submit" : "zml.route.request",
      "gen_ai.request.model": request.model,
      "zml.decision_id": decisionId,
      "zml.request_id": request.requestId,
      "zml.tier": request.tier,
      "zml.stream": request.stream,
      ...(request.fallbackModels.length
        ? { "zml.fallback_models": request.fallbackModels.join(",") }
        : {}),
      ...(request.acceleratorHint ? { "zml.accelerator_hint": request.acceleratorHint } : {}),
    },
  });
}

/** One decision of the routing core, with its inputs, its choice and what it passed over. */
export function recordDecision(
  decisionId: string,
  policy: ResolvedPolicy,
  attempt: number,
  outcome: { decision: Decision } | { rejection: Rejection },
): void {
  const span = tracer.startSpan("zml.decision", { kind: SpanKind.INTERNAL });
  // Unsampled (or nothing exports): skip building attributes and events nobody reads.
  if (!span.isRecording()) {
    span.end();
    return;
  }
  const common: Attributes = {
    "zml.decision_id": decisionId,
    "zml.policy": policy.name,
    "zml.cost_priority": policy.costPriority,
    "zml.latency_target_ms": policy.latencyTargetMs,
    "zml.attempt": attempt,
  };
  if ("decision" in outcome) {
    const d = outcome.decision;
    const chosen = d.candidates[0]!;
    span.setAttributes({
      ...common,
      "zml.outcome": "chosen",
      "gen_ai.request.model": d.model,
      "zml.tier": d.tier,
      "zml.ranking": d.ranking,
      "zml.node": chosen.node.id,
      "zml.family": chosen.node.accelerator_family,
      "zml.queue_depth": chosen.queueDepth,
      "zml.estimate.response_ms": Math.round(chosen.responseMs),
      ...(chosen.costUsd === null ? {} : { "zml.estimate.cost_usd": chosen.costUsd }),
      // Which price the cost came from and how old it was when the decision was made.
      "zml.price.source": chosen.price.source,
      "zml.price.stale": chosen.price.stale,
      ...(chosen.price.usdPerHour === null
        ? {}
        : { "zml.price.usd_per_hour": chosen.price.usdPerHour }),
      ...(chosen.price.updatedAt === null
        ? {}
        : { "zml.price.updated_at": chosen.price.updatedAt }),
      "zml.latency_target_met": d.latencyTargetMet,
      "zml.candidates.viable": d.viable,
      "zml.candidates.passed_over": d.passedOver.length,
    });
    addPassedOver(span, d.passedOver);
  } else {
    const r = outcome.rejection;
    span.setAttributes({
      ...common,
      "zml.outcome": "rejected",
      "zml.rejection.reason": r.reason,
      "zml.candidates.passed_over": r.passedOver.length,
    });
    addPassedOver(span, r.passedOver);
  }
  span.end();
}

function addPassedOver(span: Span, passedOver: readonly PassedOver[]): void {
  for (const p of passedOver.slice(0, MAX_PASSED_OVER_EVENTS)) {
    span.addEvent("zml.candidate.passed_over", {
      "zml.node": p.nodeId,
      "zml.family": p.family,
      "zml.reason": p.reason,
    });
  }
}

export function startAttemptSpan(
  node: NodeSpec,
  path: string,
  attempt: number,
  kind: "first" | "retry" | "fallback",
  model: string,
): Span {
  const server = serverOf(node.endpoint);
  return tracer.startSpan("POST", {
    kind: SpanKind.CLIENT,
    attributes: {
      "http.request.method": "POST",
      "server.address": server.address,
      "server.port": server.port,
      "url.path": path,
      "gen_ai.request.model": model,
      "zml.node": node.id,
      "zml.family": node.accelerator_family,
      "zml.attempt": attempt,
      "zml.attempt.kind": kind,
    },
  });
}

/** Host and port of each endpoint, parsed once rather than on every attempt. */
const servers = new Map<string, { address: string; port: number }>();

function serverOf(endpoint: string): { address: string; port: number } {
  let server = servers.get(endpoint);
  if (server === undefined) {
    const url = new URL(endpoint);
    server = {
      address: url.hostname,
      port: Number(url.port || (url.protocol === "https:" ? 443 : 80)),
    };
    // Endpoints change only with the fleet; the bound keeps a churning fleet from growing it.
    if (servers.size >= 10_000) servers.clear();
    servers.set(endpoint, server);
  }
  return server;
}

export function endAttemptSpan(span: Span, status: number | null, error: string | null): void {
  if (status !== null) span.setAttribute("http.response.status_code", status);
  if (error !== null) {
    span.setAttribute("error.type", error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  }
  span.end();
}

export function endRouteSpan(span: Span, attributes: Attributes, error: string | null): void {
  span.setAttributes(attributes);
  if (error !== null) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  span.end();
}

export function startQueueWaitSpan(): Span {
  return tracer.startSpan("zml.queue.wait", { kind: SpanKind.INTERNAL });
}
