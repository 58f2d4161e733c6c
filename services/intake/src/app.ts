import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import { context, propagation } from "@opentelemetry/api";
import { createHeaders, errorOfFrame } from "@zml/bus";
import type { Bus, ReplyMux, RouteFrame } from "@zml/bus";
import {
  HEADERS,
  MESSAGE_TYPES,
  ROUTE_REQUEST_SUBJECT,
  ROUTING_HTTP_HEADER,
  ZmlError,
  toOpenAiError,
} from "@zml/contracts";
import type { AccountSpec, InferencePath, ModelSpec, PolicySpec } from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import Fastify from "fastify";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Registry } from "prom-client";
import type { Authenticator } from "./auth.ts";
import type { IntakeConfig } from "./config.ts";
import { createIntakeMetrics } from "./metrics.ts";
import { resolvePolicyName } from "./policy.ts";
import { extractRouteFields } from "./route-fields.ts";
import { sseErrorEvent } from "./sse.ts";

export interface IntakeDeps {
  bus: Bus;
  mux: ReplyMux;
  auth: Authenticator;
  models: ReadonlyMap<string, ModelSpec>;
  policies: ReadonlyMap<string, PolicySpec>;
  registry: Registry;
  log: Logger;
  config: Pick<
    IntakeConfig,
    "ZML_BODY_LIMIT_BYTES" | "ZML_REQUEST_TIMEOUT_MS" | "ZML_HEADERS_TIMEOUT_MS"
  >;
  clock: () => number;
  isReady: () => boolean;
}

const REQUEST_ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;

/** Builds the intake HTTP app from injected parts; `main.ts` only starts it. */
export async function buildApp(deps: IntakeDeps) {
  const app = Fastify({
    loggerInstance: deps.log,
    disableRequestLogging: true,
    bodyLimit: deps.config.ZML_BODY_LIMIT_BYTES,
    requestTimeout: deps.config.ZML_REQUEST_TIMEOUT_MS + 5_000,
    connectionTimeout: 0,
    http: { headersTimeout: deps.config.ZML_HEADERS_TIMEOUT_MS },
    // A client-supplied request id is kept only when it is safe to echo and log.
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && REQUEST_ID_PATTERN.test(given) ? given : randomUUID();
    },
  });
  const metrics = createIntakeMetrics(deps.registry);

  // Bodies stay raw bytes: they are forwarded to the node as received. Any content type is
  // accepted and must parse as JSON, so a bare `curl -d` works too.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err, req, reply) => {
    const error = toZmlError(err);
    if (error.code === "internal_error") req.log.error({ err }, "unhandled error");
    if (error.code === "payload_too_large") {
      // Read the rest of the oversize body into the void and close afterwards, so the client
      // finishes its upload and sees the 413 instead of a broken pipe; an endless body is cut.
      let drained = 0;
      req.raw.on("data", (chunk: Buffer) => {
        drained += chunk.length;
        if (drained > 4 * deps.config.ZML_BODY_LIMIT_BYTES) req.raw.destroy();
      });
      req.raw.resume();
      reply.header("connection", "close");
    }
    return sendError(reply, error);
  });
  app.setNotFoundHandler((req, reply) =>
    sendError(reply, new ZmlError("not_found", `no route for ${req.method} ${req.url}`, "path")),
  );

  app.get("/healthz", () => ({ status: "ok" }));
  app.get("/readyz", (_req, reply) =>
    deps.isReady()
      ? { status: "ready" }
      : reply.code(503).send({ status: "not_ready" }),
  );
  app.get("/metrics", async (_req, reply) =>
    reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
  );

  app.get("/v1/models", (req) => {
    deps.auth.authenticate(req.headers.authorization);
    return {
      object: "list",
      data: [...deps.models.values()].map((m) => ({
        id: m.id,
        object: "model",
        created: 0,
        owned_by: "zml",
      })),
    };
  });

  for (const path of ["/v1/chat/completions", "/v1/completions"] as const) {
    app.post(path, (req, reply) => infer(deps, metrics, path, req, reply));
  }
  return app;
}

function infer(
  deps: IntakeDeps,
  metrics: ReturnType<typeof createIntakeMetrics>,
  path: InferencePath,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<unknown> | FastifyReply {
  const startedAt = deps.clock();
  const account: AccountSpec = deps.auth.authenticate(req.headers.authorization);
  if (!Buffer.isBuffer(req.body)) {
    throw new ZmlError("invalid_request", "request body is required", "body");
  }
  const body = req.body;
  const fields = extractRouteFields(path, body);
  const model = deps.models.get(fields.model);
  if (!model) {
    throw new ZmlError("unknown_model", `model '${fields.model}' does not exist`, "model");
  }
  if (!account.allowed_tiers.includes(fields.tier)) {
    throw new ZmlError("tier_not_allowed", `account may not use tier ${fields.tier}`, "tier");
  }
  const policy = resolvePolicyName(fields.policy, model, account, deps.policies);
  if (!deps.bus.isConnected()) {
    throw new ZmlError("bus_unavailable", "gateway is reconnecting to its message bus", null, 1);
  }

  const h = createHeaders();
  h.set(HEADERS.type, MESSAGE_TYPES.routeRequestV1);
  h.set(HEADERS.requestId, req.id);
  h.set(HEADERS.model, fields.model);
  h.set(HEADERS.path, path);
  h.set(HEADERS.stream, fields.stream ? "1" : "0");
  h.set(HEADERS.tier, String(fields.tier));
  h.set(HEADERS.policy, policy);
  h.set(HEADERS.account, account.id);
  h.set(HEADERS.deadline, String(startedAt + deps.config.ZML_REQUEST_TIMEOUT_MS));
  if (fields.acceleratorHint) h.set(HEADERS.acceleratorHint, fields.acceleratorHint);
  propagation.inject(context.active(), h, { set: (c, k, v) => c.set(k, v) });

  const done = (status: number) => {
    metrics.requests.inc({ route: path, status: String(status) });
    metrics.duration.observe({ route: path }, (deps.clock() - startedAt) / 1000);
  };
  const send = (onFrame: (frame: RouteFrame) => void) => {
    const pending = deps.mux.request(ROUTE_REQUEST_SUBJECT, body, h, onFrame, {
      idleTimeoutMs: deps.config.ZML_REQUEST_TIMEOUT_MS,
    });
    // A client that goes away stops the relay (propagating the abort to the node is the
    // dispatcher's part of the client-disconnect work).
    reply.raw.on("close", () => {
      if (!reply.raw.writableFinished) pending.cancel();
    });
  };

  if (!fields.stream) {
    return new Promise((resolve) => {
      send((frame) => {
        if (frame.routing) reply.header(ROUTING_HTTP_HEADER, frame.routing);
        if (frame.kind === "full") {
          reply.code(frame.status ?? 502).header("content-type", frame.contentType);
          done(frame.status ?? 502);
          resolve(reply.send(Buffer.from(frame.data.buffer, frame.data.byteOffset, frame.data.byteLength)));
          return;
        }
        // `head`/`chunk` only come for streams; anything else here is an error frame.
        const error =
          frame.kind === "error"
            ? errorOfFrame(frame)
            : new ZmlError("internal_error", `unexpected ${frame.kind} frame`);
        done(error.status);
        resolve(sendError(reply, error));
      });
    });
  }

  reply.hijack();
  const res = reply.raw;
  send((frame) => relayStreamFrame(res, frame, req.id, done));
  return reply;
}

/** Writes one reply frame of a streamed response to the client's socket. */
function relayStreamFrame(
  res: ServerResponse,
  frame: RouteFrame,
  requestId: string,
  done: (status: number) => void,
): void {
  const routing = frame.routing ? { [ROUTING_HTTP_HEADER]: frame.routing } : {};
  switch (frame.kind) {
    case "head":
      res.writeHead(frame.status ?? 200, {
        "content-type": frame.contentType ?? "text/event-stream",
        "cache-control": "no-cache",
        "x-request-id": requestId,
        ...routing,
      });
      return;
    case "chunk":
      res.write(frame.data);
      return;
    case "end":
      res.end();
      done(res.statusCode);
      return;
    case "full":
      res.writeHead(frame.status ?? 502, {
        "content-type": frame.contentType ?? "application/json",
        "x-request-id": requestId,
        ...routing,
      });
      res.end(frame.data);
      done(frame.status ?? 502);
      return;
    case "error": {
      const error = errorOfFrame(frame);
      if (res.headersSent) {
        res.end(sseErrorEvent(error.toBody()));
        done(res.statusCode);
      } else {
        res.writeHead(error.status, {
          "content-type": "application/json",
          "x-request-id": requestId,
          ...(error.retryAfterS ? { "retry-after": String(error.retryAfterS) } : {}),
          ...routing,
        });
        res.end(JSON.stringify(toOpenAiError(error.toBody())));
        done(error.status);
      }
      return;
    }
  }
}

function sendError(reply: FastifyReply, error: ZmlError): FastifyReply {
  if (error.retryAfterS) reply.header("retry-after", String(error.retryAfterS));
  return reply.code(error.status).send(toOpenAiError(error.toBody()));
}

function toZmlError(err: unknown): ZmlError {
  if (err instanceof ZmlError) return err;
  const code = (err as { code?: string }).code;
  if (code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return new ZmlError("payload_too_large", "request body is larger than the limit", "body");
  }
  if (code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    return new ZmlError("unsupported_media_type", "unsupported content type", "content-type");
  }
  const status = (err as { statusCode?: number }).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return new ZmlError("invalid_request", (err as Error).message, null);
  }
  return new ZmlError("internal_error", "internal error");
}
