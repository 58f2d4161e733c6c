import { randomUUID } from "node:crypto";
import { context, propagation } from "@opentelemetry/api";
import { createReplyWriter, extractTraceContext, publishJson } from "@zml/bus";
import type { Bus, Msg } from "@zml/bus";
import {
  NodeObservationSchema,
  ZmlError,
  nodeObservationSubject,
  serializeRoutingHeader,
} from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import { callNode } from "./node-call.ts";
import type { DispatcherConfig } from "./config.ts";
import type { MutableFleetView } from "./fleet-view.ts";
import type { NodePools } from "./node-pools.ts";
import { readRouteRequest } from "./route-request.ts";
import type { RouteRequest } from "./route-request.ts";
import { selectNodes } from "./select-node.ts";
import type { DispatcherMetrics } from "./metrics.ts";

/** Attempts per request across retries and fallbacks, whatever fails (design §3.6). */
export const MAX_ATTEMPTS = 3;

export interface RouteHandlerDeps {
  bus: Bus;
  view: MutableFleetView;
  pools: NodePools;
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
 * Handles one `route.request`: picks a node, sends it the client's bytes unchanged, relays
 * the answer, and retries on other nodes on 5xx or network errors while nothing has reached
 * the client yet, within {@link MAX_ATTEMPTS}.
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
    const traceContext = extractTraceContext(msg.headers);
    await context.with(traceContext, () => route(deps, request, msg.data, writer));
  };
}

async function route(
  deps: RouteHandlerDeps,
  request: RouteRequest,
  body: Uint8Array,
  writer: ReturnType<typeof createReplyWriter>,
): Promise<void> {
  const decisionId = randomUUID();
  const log = deps.log.child({ decision_id: decisionId, request_id: request.requestId });
  const failed = new Set<string>();
  let lastFailure = "";

  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const now = deps.clock();
    if (now >= request.deadline) {
      writer.error(new ZmlError("gateway_timeout", "request deadline passed").toBody());
      deps.metrics.decisions.inc({ outcome: "deadline" });
      return;
    }
    const selection = selectNodes(
      deps.view,
      { model: request.model, tier: request.tier, exclude: failed },
      now,
      deps.random,
    );
    if (!selection.ok) {
      const error =
        attempt > 1
          ? new ZmlError("upstream_unavailable", `every attempt failed: ${lastFailure}`)
          : selection.reason === "saturated"
            ? new ZmlError("saturated", "every node for this model and tier is busy", null, 1)
            : new ZmlError(
                "no_node_available",
                `no active node serves model '${request.model}' at tier ${request.tier}`,
                "model",
                5,
              );
      deps.metrics.decisions.inc({ outcome: error.code });
      log.info({ outcome: error.code, attempts: attempt - 1 }, "request not routed");
      writer.error(error.toBody());
      return;
    }
    const { node, queueDepth } = selection.candidates[0]!;
    const routing = serializeRoutingHeader({
      decisionId,
      node: node.id,
      policy: request.policy,
      family: node.accelerator_family,
      queueDepth,
      tier: node.tier,
      attempts: attempt,
    });
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: request.stream ? "text/event-stream" : "application/json",
    };
    propagation.inject(context.active(), headers);

    deps.view.acquire(node.id);
    const startedAt = deps.clock();
    const outcome = await callNode({
      pool: deps.pools.get(node),
      path: deps.pools.pathFor(node, request.path),
      body,
      headers,
      stream: request.stream,
      signal: AbortSignal.timeout(Math.max(1, request.deadline - startedAt)),
      headersTimeoutMs: deps.config.DISPATCH_HEADERS_TIMEOUT_MS,
      bodyIdleTimeoutMs: deps.config.DISPATCH_BODY_IDLE_TIMEOUT_MS,
      writer,
      routing,
      startedAt,
      clock: deps.clock,
    }).finally(() => deps.view.release(node.id));
    const latencyMs = deps.clock() - startedAt;

    publishJson(deps.bus, nodeObservationSubject(node.id), NodeObservationSchema, {
      type: "node.observation.v1",
      node_id: node.id,
      decision_id: decisionId,
      outcome:
        outcome.kind === "retryable" ? outcome.outcome : outcome.kind === "broken" ? "network_error" : "ok",
      status: outcome.status,
      latency_ms: latencyMs,
      ttft_ms: outcome.kind === "retryable" ? null : outcome.ttftMs,
      at: deps.clock(),
    });
    deps.metrics.attempts.inc({ node: node.id, outcome: outcome.kind });

    if (outcome.kind !== "retryable") {
      deps.metrics.decisions.inc({ outcome: outcome.kind === "relayed" ? "routed" : "broken" });
      log.info(
        { node: node.id, family: node.accelerator_family, status: outcome.status, attempts: attempt, latency_ms: latencyMs },
        outcome.kind === "relayed" ? "request routed" : "stream broke after first byte",
      );
      return;
    }
    failed.add(node.id);
    deps.view.coolDown(node.id, deps.clock() + deps.config.NODE_COOLDOWN_MS);
    lastFailure = `${node.id}: ${outcome.error}`;
    log.warn({ node: node.id, attempt, error: outcome.error }, "attempt failed; trying another node");
  }
  deps.metrics.decisions.inc({ outcome: "attempts_exhausted" });
  writer.error(
    new ZmlError("upstream_unavailable", `all ${MAX_ATTEMPTS} attempts failed: ${lastFailure}`).toBody(),
  );
}

function asZmlError(err: unknown): ZmlError {
  return err instanceof ZmlError ? err : new ZmlError("internal_error", "unexpected error");
}
