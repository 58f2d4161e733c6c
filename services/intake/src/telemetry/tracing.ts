import { ROOT_CONTEXT, SpanKind, SpanStatusCode, propagation, trace } from "@opentelemetry/api";
import type { Span } from "@opentelemetry/api";
import type { FastifyRequest } from "fastify";

/**
 * The server span of one inference request: the root of the trace that continues over NATS
 * into the dispatcher and on to the node. A client's own `traceparent` is honoured. No
 * header values other than the request id, and nothing of the body, go into it.
 */
const tracer = trace.getTracer("zml-intake");

export function startServerSpan(req: FastifyRequest, route: string): Span {
  const parent = propagation.extract(ROOT_CONTEXT, req.headers);
  return tracer.startSpan(
    `POST ${route}`,
    {
      kind: SpanKind.SERVER,
      attributes: {
        "http.request.method": "POST",
        "http.route": route,
        "url.path": route,
        "network.protocol.version": req.raw.httpVersion,
        "zml.request_id": req.id,
      },
    },
    parent,
  );
}

export function endServerSpan(
  span: Span,
  status: number,
  decisionId: string | undefined,
  addedMs: number | undefined,
): void {
  span.setAttribute("http.response.status_code", status);
  if (decisionId) span.setAttribute("zml.decision_id", decisionId);
  if (addedMs !== undefined) span.setAttribute("zml.added_latency_ms", addedMs);
  if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}
