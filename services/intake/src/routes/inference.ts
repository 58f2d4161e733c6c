import { injectTraceContext } from "@zml/bus";
import type { Bus, ReplyMux } from "@zml/bus";
import { context, trace } from "@opentelemetry/api";
import {
  HEADERS,
  INFERENCE_PATH_APIS,
  INFERENCE_PATHS,
  InferRequestSchema,
  MESSAGE_TYPES,
  ROUTING_HTTP_HEADER,
  SEALED_REQUEST_MEDIA_TYPE,
  SEALED_RESPONSE_MEDIA_TYPE,
  SealedRequestSchema,
  ZmlError,
  parseRoutingHeader,
} from "@zml/contracts";
import type { AccountSpec, InferencePath } from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import type { ZodOpenApiOperationObject, ZodOpenApiPathsObject } from "zod-openapi";
import { errorCodeSent } from "../http/errors.ts";
import type { IntakeMetrics } from "../telemetry/metrics.ts";
import { relay } from "../relay/relay.ts";
import type { RelayOutcome } from "../relay/relay.ts";
import { endServerSpan, startServerSpan } from "../telemetry/tracing.ts";
import {
  extractRouteFields,
  extractSealedFields,
  isSealedBody,
  parseNativeCall,
  refuseClearTier4,
} from "../request/route-fields.ts";
import type { RouteFields } from "../request/route-fields.ts";
import { admit } from "../admission/admit.ts";
import { authoriseTiers, SEALED_TIER, tierGate } from "../admission/tier-gate.ts";
import type { ClientRouteDeps } from "./deps.ts";
import { AnyObjectSchema, API_KEY, EventStreamSchema, json } from "./docs.ts";
import { planHeaders, planRoute } from "../request/route-plan.ts";
import type { RoutePlan } from "../request/route-plan.ts";

export interface InferenceRouteDeps extends ClientRouteDeps {
  mux: ReplyMux;
  metrics: IntakeMetrics;
  requestTimeoutMs: number;
  /** See `RelayDeps.maxBufferedBytes`. */
  maxBufferedBytes: number;
  /** See `RelayDeps.reroutes`. */
  reroutes: number;
}

/**
 * The inference calls: the OpenAI-compatible `/v1/chat/completions`, `/v1/completions`,
 * `/v1/responses` and `/v1/embeddings` (the client's bytes reach the node unchanged) and the
 * native `/v1/infer`. All are routed the same way, each only to nodes serving its API, and
 * answer with the `x-zml-routing` header.
 */
export function inferenceRoutes(deps: InferenceRouteDeps) {
  return (app: FastifyInstance) => {
    // A relayed request is counted when its answer ends (`finish`, which knows how it ended);
    // every other one, refused before routing (401, 429, 400, 404, 413…), when its response
    // is sent.
    const relayed = new WeakSet<FastifyRequest>();
    app.addHook("onResponse", (req, reply, done) => {
      if (!relayed.has(req)) {
        const route = req.routeOptions.url ?? req.url;
        const code = errorCodeSent(reply) ?? "none";
        deps.metrics.requests.inc({ route, status: String(reply.statusCode), code });
        deps.metrics.duration.observe({ route }, reply.elapsedTime / 1000);
      }
      done();
    });
    for (const path of Object.keys(INFERENCE_PATHS) as InferencePath[]) {
      app.post(path, (req, reply) => {
        const startedAt = deps.clock();
        const account = admit(deps, req.headers.authorization, startedAt);
        const sealed = isSealedBody(req.headers["content-type"]);
        // The tier comes first (a sealed body is tier 4), then the body's shape.
        if (sealed) authoriseTiers(account, [SEALED_TIER]);
        const body = requireBody(req);
        const fields = sealed
          ? extractSealedFields(body)
          : refuseClearTier4(extractRouteFields(path, body, tierGate(account)));
        const f = { account, fields, path, body, startedAt, route: path };
        return forward(deps, req, reply, f, relayed);
      });
    }
    app.post("/v1/infer", (req, reply) => {
      const startedAt = deps.clock();
      const account = admit(deps, req.headers.authorization, startedAt);
      if (isSealedBody(req.headers["content-type"])) {
        authoriseTiers(account, [SEALED_TIER]);
        throw new ZmlError(
          "invalid_request",
          "/v1/infer rewrites the body it forwards, so it cannot carry a sealed one: " +
            "send sealed requests to the OpenAI path they are for (e.g. /v1/chat/completions)",
          { param: "content-type" },
        );
      }
      const call = parseNativeCall(requireBody(req), tierGate(account));
      refuseClearTier4(call.fields);
      const f = {
        account,
        fields: call.fields,
        path: call.path,
        body: call.body,
        startedAt,
        route: "/v1/infer",
      };
      return forward(deps, req, reply, f, relayed);
    });
  };
}

/** One inference call in the OpenAPI document. */
function inferenceOperation(o: {
  operationId: string;
  summary: string;
  /** The schema the route checks the body with. */
  body: z.ZodType;
  answer: string;
  streams: boolean;
  sealable: boolean;
}): ZodOpenApiOperationObject {
  return {
    operationId: o.operationId,
    tags: ["inference"],
    summary: o.summary,
    description:
      `${o.answer} The body reaches the node unchanged; only the routing fields are checked, ` +
      "and only nodes serving this API are candidates." +
      (o.streams
        ? " With `stream: true` the answer is server-sent events, relayed whole; a stream " +
          "that breaks ends with `event: error` instead of its final event."
        : "") +
      (o.sealable
        ? ` A tier-4 request is sent sealed (\`${SEALED_REQUEST_MEDIA_TYPE}\`, docs/sealed-channel.md): ` +
          "its answer is sealed too, and the body is never opened in the gateway."
        : ""),
    security: API_KEY,
    requestBody: {
      required: true,
      content: {
        ...json(o.body),
        ...(o.sealable ? { [SEALED_REQUEST_MEDIA_TYPE]: { schema: SealedRequestSchema } } : {}),
      },
    },
    responses: {
      "200": {
        description: "The node's answer",
        headers: { [ROUTING_HTTP_HEADER]: { $ref: "#/components/headers/Routing" } },
        content: {
          ...json(AnyObjectSchema),
          ...(o.streams ? { "text/event-stream": { schema: EventStreamSchema } } : {}),
          ...(o.sealable ? { [SEALED_RESPONSE_MEDIA_TYPE]: { schema: AnyObjectSchema } } : {}),
        },
      },
    },
  };
}

/** The inference calls in the OpenAPI document, with the body schemas the routes check. */
export const inferencePaths: ZodOpenApiPathsObject = {
  "/v1/chat/completions": {
    post: inferenceOperation({
      operationId: "createChatCompletion",
      summary: "OpenAI-compatible chat completion",
      body: INFERENCE_PATHS["/v1/chat/completions"],
      answer: "A chat completion.",
      streams: true,
      sealable: true,
    }),
  },
  "/v1/completions": {
    post: inferenceOperation({
      operationId: "createCompletion",
      summary: "OpenAI-compatible text completion",
      body: INFERENCE_PATHS["/v1/completions"],
      answer: "A text completion.",
      streams: true,
      sealable: true,
    }),
  },
  "/v1/responses": {
    post: inferenceOperation({
      operationId: "createResponse",
      summary: "OpenAI Responses API",
      body: INFERENCE_PATHS["/v1/responses"],
      answer: "A response object; ZML stores none, so the input must be whole.",
      streams: true,
      sealable: true,
    }),
  },
  "/v1/embeddings": {
    post: inferenceOperation({
      operationId: "createEmbedding",
      summary: "OpenAI-compatible embeddings",
      body: INFERENCE_PATHS["/v1/embeddings"],
      answer: "One embedding per input, as floats or base64.",
      streams: false,
      sealable: true,
    }),
  },
  "/v1/infer": {
    post: inferenceOperation({
      operationId: "infer",
      summary: "ZML native inference call",
      body: InferRequestSchema,
      answer: "A chat completion, from a strict body with the routing fields first-class.",
      streams: true,
      sealable: false,
    }),
  },
};

function requireBody(req: FastifyRequest): Buffer {
  if (!Buffer.isBuffer(req.body) || req.body.length === 0) {
    throw new ZmlError("invalid_request", "request body is required", { param: "body" });
  }
  return req.body;
}

interface Forward {
  account: AccountSpec;
  fields: RouteFields;
  /** The OpenAI path the node is called on. */
  path: InferencePath;
  body: Buffer;
  startedAt: number;
  /** The client-facing route, for metrics. */
  route: string;
}

/** How long a request waits for intake's bus connection to come back before a 503. */
const RECONNECT_GRACE_MS = 2_000;

function forward(
  deps: InferenceRouteDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  f: Forward,
  relayed: WeakSet<FastifyRequest>,
): Promise<unknown> | FastifyReply {
  const plan = planRoute(
    f.fields,
    f.account,
    deps.models,
    deps.policies,
    f.route === "/v1/infer" ? "fallback_models" : "models",
  );
  if (!deps.bus.isConnected()) {
    // A lost nats-server costs its clients a reconnect to another one (well under a second):
    // a request arriving meanwhile waits for it rather than failing.
    return deps.bus.waitConnected(RECONNECT_GRACE_MS).then((up) => {
      if (!up) {
        throw new ZmlError("bus_unavailable", "gateway is reconnecting to its message bus", {
          retryAfterS: 1,
        });
      }
      return forward(deps, req, reply, f, relayed);
    });
  }
  checkFitsBus(deps.bus, f.body.length);
  const span = startServerSpan(req, f.route);
  relayed.add(req);
  const finish = (status: number, outcome: RelayOutcome) => {
    const now = deps.clock();
    const code = outcome.errorCode ?? "none";
    deps.metrics.requests.inc({ route: f.route, status: String(status), code });
    deps.metrics.duration.observe({ route: f.route }, (now - f.startedAt) / 1000);
    // What ZML added: time to the first answer frame here, minus the node's own time.
    const addedMs =
      outcome.nodeMs !== undefined && outcome.firstFrameAt !== undefined
        ? Math.max(0, outcome.firstFrameAt - f.startedAt - outcome.nodeMs)
        : undefined;
    if (addedMs !== undefined) {
      deps.metrics.addedLatency.observe(
        { route: f.route, stream: String(f.fields.stream) },
        addedMs / 1000,
      );
    }
    const logged = (req.log as unknown as Logger).isLevelEnabled("info");
    // Read out of the routing header only for a span that records or a line that is written.
    const decisionId =
      outcome.routing && (logged || span.isRecording()) ? decisionIdOf(outcome.routing) : undefined;
    endServerSpan(span, status, decisionId, addedMs);
    // Logged in the span's context so the line carries its trace and span ids.
    if (!logged) return;
    context.with(trace.setSpan(context.active(), span), () =>
      req.log.info(
        {
          decision_id: decisionId,
          route: f.route,
          status,
          code: outcome.errorCode,
          account: f.account.id,
          model: plan.model,
          duration_ms: now - f.startedAt,
          added_ms: addedMs,
          ...(outcome.reroutes > 0 ? { reroutes: outcome.reroutes } : {}),
        },
        "request completed",
      ),
    );
  };
  // Inside the span's context, so the bus headers carry it to the dispatcher.
  return context.with(trace.setSpan(context.active(), span), () =>
    relay({
      deps: {
        bus: deps.bus,
        mux: deps.mux,
        // The dispatcher ends a call at the deadline with its own, precise error; a little
        // longer here lets that error reach the client rather than a bare gateway timeout.
        idleTimeoutMs: deps.requestTimeoutMs + DEADLINE_GRACE_MS,
        maxBufferedBytes: deps.maxBufferedBytes,
        reroutes: deps.reroutes,
        clock: deps.clock,
      },
      req,
      reply,
      body: f.body,
      headers: routeHeaders(req.id, f, plan, f.startedAt + deps.requestTimeoutMs),
      streamApi: f.fields.stream ? INFERENCE_PATH_APIS[f.path] : null,
      finish,
    }),
  );
}

/** Room kept in a bus message for the routing headers and trace context. */
const HEADER_ROOM_BYTES = 16 * 1024;

/**
 * A body goes to the dispatcher in one NATS message. A server whose `max_payload` is below
 * intake's body limit (a misconfiguration) would refuse it; the client gets a clear 413
 * naming both sizes instead of a 500.
 */
function checkFitsBus(bus: Bus, bodyBytes: number): void {
  const max = bus.maxPayload();
  if (max !== undefined && bodyBytes + HEADER_ROOM_BYTES > max) {
    throw new ZmlError(
      "payload_too_large",
      `request body of ${bodyBytes} bytes is larger than this gateway's message bus carries ` +
        `(${max - HEADER_ROOM_BYTES} bytes)`,
      { param: "body" },
    );
  }
}

function decisionIdOf(routing: string): string | undefined {
  try {
    return parseRoutingHeader(routing).decisionId;
  } catch {
    return undefined;
  }
}

/** The bus headers of a `route.request`; every value was validated before it gets here. */
const DEADLINE_GRACE_MS = 2_000;

function routeHeaders(requestId: string, f: Forward, plan: RoutePlan, deadline: number) {
  const h = planHeaders(MESSAGE_TYPES.routeRequestV1, f.path, f.fields, plan, f.account);
  h.set(HEADERS.requestId, requestId);
  h.set(HEADERS.stream, f.fields.stream ? "1" : "0");
  h.set(HEADERS.deadline, String(deadline));
  if (f.fields.sessionId) h.set(HEADERS.sessionId, f.fields.sessionId);
  if (f.fields.sealedKeyId) h.set(HEADERS.sealedKeyId, f.fields.sealedKeyId);
  return injectTraceContext(h);
}
