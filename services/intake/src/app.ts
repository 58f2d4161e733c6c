import { randomUUID } from "node:crypto";
import type { Http2ServerRequest } from "node:http2";
import type { Bus, ReplyMux } from "@zml/bus";
import { createNodeAddressPolicy, ZmlError } from "@zml/contracts";
import type { ModelSpec, PolicySpec } from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import Fastify, { LogController } from "fastify";
import type { Registry } from "prom-client";
import type { ConfigStore } from "./admin/store.ts";
import type { AllowlistFeed } from "./allowlist-feed.ts";
import { createAuthThrottle } from "./auth-throttle.ts";
import { createAdminAuthenticator } from "./auth.ts";
import type { Authenticator } from "./auth.ts";
import { bodyDeadline } from "./body-deadline.ts";
import type { IntakeConfig } from "./config.ts";
import { isHttp2, sendError, toZmlError } from "./errors.ts";
import { createIntakeMetrics } from "./metrics.ts";
import { buildOpenApiDocument } from "./openapi.ts";
import type { RateLimiter } from "./rate-limit.ts";
import { adminRoutes } from "./routes/admin.ts";
import { allowlistRoutes } from "./routes/allowlist.ts";
import { attestationRoutes } from "./routes/attestation.ts";
import { inferenceRoutes } from "./routes/inference.ts";
import { jobRoutes } from "./routes/jobs.ts";
import { modelRoutes } from "./routes/models.ts";
import { opsRoutes } from "./routes/ops.ts";
import { sessionRoutes } from "./routes/sessions.ts";
import { createServerFactory } from "./server.ts";
import { settleUnreadBody } from "./unread-body.ts";
import type { ServerOptions } from "./server.ts";

export interface IntakeDeps {
  bus: Bus;
  mux: ReplyMux;
  auth: Authenticator;
  rateLimiter: RateLimiter;
  models: ReadonlyMap<string, ModelSpec>;
  policies: ReadonlyMap<string, PolicySpec>;
  /** The admin API's store; the admin API is off (404) without `ZML_ADMIN_TOKEN`. */
  configStore: ConfigStore;
  /** Nodes, attestation results and revocations, for the public allowlist. */
  allowlist: Pick<AllowlistFeed, "sources" | "onChange">;
  registry: Registry;
  log: Logger;
  config: Pick<
    IntakeConfig,
    | "ZML_BODY_LIMIT_BYTES"
    | "ZML_REQUEST_TIMEOUT_MS"
    | "ZML_HEADERS_TIMEOUT_MS"
    | "ZML_BODY_TIMEOUT_MS"
    | "ZML_IDLE_TIMEOUT_MS"
    | "ZML_H2C"
    | "ZML_ADMIN_TOKEN"
    | "ZML_AUTH_FAILURE_BURST"
    | "ZML_AUTH_FAILURES_PER_MINUTE"
    | "ZML_ATTESTATION_NONCE_PER_MINUTE"
    | "ZML_CLIENT_BUFFER_MAX_BYTES"
    | "ZML_NODE_ALLOW_CIDRS"
    | "ZML_NODE_DENY_CIDRS"
  >;
  /** PEM key and certificate when serving TLS. */
  tls: ServerOptions["tls"];
  clock: () => number;
  isReady: () => boolean;
}

/** Routes that take a credential; ops routes (`/healthz`, `/metrics`, …) are never throttled. */
const AUTHENTICATED_PREFIXES = ["/v1/", "/admin/"];

const REQUEST_ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;
const VERSION = "1.0.0";

/** Builds the intake HTTP app from injected parts; `main.ts` only starts it. */
export async function buildApp(deps: IntakeDeps) {
  const { config } = deps;
  const app = Fastify({
    loggerInstance: deps.log,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.ZML_BODY_LIMIT_BYTES,
    serverFactory: createServerFactory({
      tls: deps.tls,
      h2c: config.ZML_H2C,
      headersTimeoutMs: config.ZML_HEADERS_TIMEOUT_MS,
      // Node's whole-request cutoff backs up the body deadline, which answers first.
      requestTimeoutMs: config.ZML_HEADERS_TIMEOUT_MS + config.ZML_BODY_TIMEOUT_MS + 1_000,
      idleTimeoutMs: config.ZML_IDLE_TIMEOUT_MS,
    }),
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
  // An HTTP/2 body need not announce its length, and fastify takes a request with neither
  // Content-Type nor Content-Length for bodiless; the stream itself says whether data follows.
  app.addHook("onRequest", (req, _reply, done) => {
    if (isHttp2(req) && req.headers["content-type"] === undefined) {
      const { stream } = req.raw as unknown as Http2ServerRequest;
      if (!stream.endAfterHeaders) req.headers["content-type"] = "application/octet-stream";
    }
    done();
  });
  const deadline = bodyDeadline(config.ZML_BODY_TIMEOUT_MS);
  app.addHook("preParsing", (req, reply, payload) =>
    req.method === "GET" || req.method === "HEAD"
      ? Promise.resolve(payload)
      : deadline(req, reply, payload),
  );
  app.addHook("onSend", (req, reply, payload, done) => {
    reply.header("x-request-id", req.id);
    // Node answers are relayed from the gateway's origin: never let a browser sniff them.
    reply.header("x-content-type-options", "nosniff");
    done(null, payload);
  });
  // Brute force: an address that failed authentication too often is refused for a while.
  const authThrottle = createAuthThrottle({
    burst: config.ZML_AUTH_FAILURE_BURST,
    perMinute: config.ZML_AUTH_FAILURES_PER_MINUTE,
    maxAddresses: 100_000,
  });
  app.addHook("onRequest", async (req, reply) => {
    if (!AUTHENTICATED_PREFIXES.some((p) => req.url.startsWith(p))) return;
    const wait = authThrottle.blockedFor(req.ip, deps.clock());
    if (wait === undefined) return;
    const message = "too many failed authentications from this address; retry later";
    return sendError(reply, new ZmlError("auth_throttled", message, "authorization", wait));
  });
  app.addHook("onResponse", (req, reply, done) => {
    if (reply.statusCode === 401) authThrottle.recordFailure(req.ip, deps.clock());
    done();
  });

  app.setErrorHandler(async (err, req, reply) => {
    const error = toZmlError(err);
    if (error.code === "internal_error") req.log.error({ err }, "unhandled error");
    if (error.code === "payload_too_large" || error.code === "request_timeout") {
      await settleUnreadBody(req, reply, {
        maxBytes: 4 * config.ZML_BODY_LIMIT_BYTES,
        timeoutMs: config.ZML_BODY_TIMEOUT_MS,
        // A slow body stays slow: only an oversize one is worth reading to its end.
        waitForEnd: error.code === "payload_too_large",
      });
    }
    return sendError(reply, error);
  });
  app.setNotFoundHandler((req, reply) =>
    sendError(reply, new ZmlError("not_found", `no route for ${req.method} ${req.url}`, "path")),
  );

  await app.register(
    opsRoutes({
      registry: deps.registry,
      isReady: deps.isReady,
      openApi: buildOpenApiDocument(VERSION),
    }),
  );
  await app.register(modelRoutes({ auth: deps.auth, models: deps.models, clock: deps.clock }));
  await app.register(
    inferenceRoutes({
      bus: deps.bus,
      mux: deps.mux,
      auth: deps.auth,
      rateLimiter: deps.rateLimiter,
      models: deps.models,
      policies: deps.policies,
      metrics,
      requestTimeoutMs: config.ZML_REQUEST_TIMEOUT_MS,
      maxBufferedBytes: config.ZML_CLIENT_BUFFER_MAX_BYTES,
      clock: deps.clock,
    }),
  );
  await app.register(sessionRoutes(deps));
  await app.register(attestationRoutes(deps));
  await app.register(allowlistRoutes({ feed: deps.allowlist, clock: deps.clock }));
  await app.register(jobRoutes(deps));
  if (config.ZML_ADMIN_TOKEN !== undefined) {
    await app.register(
      adminRoutes({
        store: deps.configStore,
        checkAdmin: createAdminAuthenticator(config.ZML_ADMIN_TOKEN),
        nodeAddresses: createNodeAddressPolicy({
          allow: config.ZML_NODE_ALLOW_CIDRS,
          deny: config.ZML_NODE_DENY_CIDRS,
        }),
        clock: deps.clock,
      }),
    );
  }
  return app;
}
