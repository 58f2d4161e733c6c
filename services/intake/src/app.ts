import { randomUUID } from "node:crypto";
import { createReplyMux } from "@zml/bus";
import type { ReplyMux } from "@zml/bus";
import { nodeAddressPolicyOf, ZmlError } from "@zml/contracts";
import { waitUntil } from "@zml/runtime";
import type { StopContext } from "@zml/runtime";
import { lazyChild } from "@zml/telemetry";
import type { Logger } from "@zml/telemetry";
import Fastify, { LogController } from "fastify";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { createKvConfigStore } from "./admin/store.ts";
import type { ConfigStore } from "./admin/store.ts";
import { watchAllowlistFeed } from "./allowlist/feed.ts";
import type { AllowlistFeed } from "./allowlist/feed.ts";
import { createAdminAuthenticator, createAuthenticator } from "./admission/auth.ts";
import type { IntakeConfig } from "./config.ts";
import { MAX_PATH_PARAM_CHARS, sendError, toZmlError } from "./http/errors.ts";
import { createKeyStoreStatus } from "./admission/key-store.ts";
import { createIntakeMetrics } from "./telemetry/metrics.ts";
import { followDispatchers } from "./relay/dispatcher-liveness.ts";
import { createInFlight } from "./relay/in-flight.ts";
import type { InFlight } from "./relay/in-flight.ts";
import { buildOpenApiDocument } from "./openapi/document.ts";
import { createRateLimiter } from "./admission/rate-limit.ts";
import type { ClientRouteDeps } from "./routes/deps.ts";
import { adminRoutes } from "./routes/admin.ts";
import { allowlistRoutes } from "./routes/allowlist.ts";
import { attestationRoutes } from "./routes/attestation.ts";
import { inferenceRoutes } from "./routes/inference.ts";
import { jobRoutes } from "./routes/jobs.ts";
import { modelRoutes } from "./routes/models.ts";
import { opsRoutes } from "./routes/ops.ts";
import { admissionHooks } from "./plugins/admission-hooks.ts";
import { errorReplies } from "./plugins/error-replies.ts";
import { rawBody } from "./plugins/raw-body.ts";
import { responseHeaders } from "./plugins/response-headers.ts";
import { sessionRoutes } from "./routes/sessions.ts";
import { closeAllConnections, createServerFactory } from "./http/server.ts";
import { watchIntakeState } from "./state/intake-state.ts";
import type { ServerOptions } from "./http/server.ts";

export interface IntakeDeps extends ClientRouteDeps {
  mux: ReplyMux;
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
    | "ZML_JOB_SUBMIT_TIMEOUT_MS"
    | "ZML_HEADERS_TIMEOUT_MS"
    | "ZML_BODY_TIMEOUT_MS"
    | "ZML_IDLE_TIMEOUT_MS"
    | "ZML_H2C"
    | "ZML_ADMIN_TOKEN"
    | "ZML_AUTH_FAILURE_BURST"
    | "ZML_AUTH_FAILURES_PER_MINUTE"
    | "ZML_ATTESTATION_NONCE_PER_MINUTE"
    | "ZML_CLIENT_BUFFER_MAX_BYTES"
    | "ZML_DISPATCHER_REROUTES"
    | "ZML_NODE_ALLOW_CIDRS"
    | "ZML_NODE_DENY_CIDRS"
    | "ZML_NODE_ALLOW_LOOPBACK"
  >;
  /** PEM key and certificate when serving TLS. */
  tls: ServerOptions["tls"];
  isReady: () => boolean;
  /** True once a stop began: client and admin calls get 503 `shutting_down` with a body. */
  isDraining?: () => boolean;
  /** Counts the requests being answered, for a graceful stop. */
  inFlight?: InFlight;
}

/** How long a stopping intake still answers after its last in-flight request ended. */
const LINGER_AFTER_LAST_ANSWER_MS = 250;

const REQUEST_ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;
const VERSION = "1.0.0";

/**
 * What one listener serves: `all` (one port for everything), `public` (the client API,
 * health and readiness), or `admin` (health, readiness, metrics, OpenAPI and the admin API).
 */
export type AppSurface = "all" | "public" | "admin";

/** Builds the intake HTTP app from injected parts; `main.ts` only starts it. */
export async function buildApp(deps: IntakeDeps, surface: AppSurface = "all") {
  const servesPublic = surface !== "admin";
  const servesAdmin = surface !== "public";
  const { config } = deps;
  const app = Fastify({
    loggerInstance: deps.log,
    // Each request's logger is built only when it writes a line (most write none at `warn`).
    childLoggerFactory: (logger, bindings, opts) => lazyChild(logger as Logger, bindings, opts),
    // `request_id`, as the dispatcher names it, so one filter finds a request's lines in both.
    logController: new LogController({
      disableRequestLogging: true,
      requestIdLogLabel: "request_id",
    }),
    bodyLimit: config.ZML_BODY_LIMIT_BYTES,
    routerOptions: { maxParamLength: MAX_PATH_PARAM_CHARS },
    // A malformed or overlong path parameter is refused before routing; fastify's own answer
    // to it would not be the error envelope every other answer uses.
    frameworkErrors: (err, _req, reply) => {
      sendError(reply, toZmlError(err));
    },
    // Refusals while stopping are answered by the admission hooks, with a body.
    return503OnClosing: false,
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

  await app.register(rawBody, { bodyTimeoutMs: config.ZML_BODY_TIMEOUT_MS });
  await app.register(responseHeaders);
  await app.register(admissionHooks, {
    authFailureBurst: config.ZML_AUTH_FAILURE_BURST,
    authFailuresPerMinute: config.ZML_AUTH_FAILURES_PER_MINUTE,
    clock: deps.clock,
    isDraining: deps.isDraining,
    inFlight: deps.inFlight,
  });
  await app.register(errorReplies, {
    bodyLimitBytes: config.ZML_BODY_LIMIT_BYTES,
    bodyTimeoutMs: config.ZML_BODY_TIMEOUT_MS,
  });

  await app.register(
    opsRoutes({
      registry: deps.registry,
      isReady: deps.isReady,
      openApi: () => buildOpenApiDocument(VERSION),
      internals: servesAdmin,
    }),
  );
  if (servesPublic) await app.register(publicRoutes(deps));
  if (servesAdmin && config.ZML_ADMIN_TOKEN !== undefined) {
    await app.register(
      adminRoutes({
        store: deps.configStore,
        checkAdmin: createAdminAuthenticator(config.ZML_ADMIN_TOKEN),
        nodeAddresses: nodeAddressPolicyOf(config),
        clock: deps.clock,
      }),
    );
  }
  return app;
}

/** The client API: inference, models, sessions, attestation checks and batch jobs. */
const publicRoutes = (deps: IntakeDeps) => async (app: FastifyInstance) => {
  const { config } = deps;
  // Registered once per registry: only the public listener counts client requests.
  const metrics = createIntakeMetrics(deps.registry);
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
      reroutes: config.ZML_DISPATCHER_REROUTES,
      clock: deps.clock,
    }),
  );
  await app.register(sessionRoutes(deps));
  await app.register(attestationRoutes(deps));
  await app.register(allowlistRoutes({ feed: deps.allowlist, clock: deps.clock }));
  await app.register(jobRoutes(deps));
};

export interface StartIntakeDeps extends Pick<
  IntakeDeps,
  "bus" | "registry" | "log" | "tls" | "clock"
> {
  config: IntakeDeps["config"] &
    Pick<
      IntakeConfig,
      | "ZML_HOST"
      | "ZML_PORT"
      | "ZML_KEY_STORE_MAX_STALE_MS"
      | "ZML_ADMIN_PORT"
      | "ZML_ADMIN_HOST"
      | "ZML_DISPATCHER_LOSS_MS"
    >;
  /**
   * The connection the admin API writes configuration with (the `admin` identity); intake's
   * own identity may only read it. Default: `bus` (tests, insecure setups).
   */
  adminBus?: IntakeDeps["bus"];
  /** The process's own stopping flag: readiness fails from the signal on. */
  isStopping?: () => boolean;
}

export interface Intake {
  app: Awaited<ReturnType<typeof buildApp>>;
  /** Where it listens, e.g. `http://127.0.0.1:8080` (the real port when 0 was asked). */
  url: string;
  /** The admin listener's URL, when `ZML_ADMIN_PORT` gave it one of its own. */
  adminUrl: string | undefined;
  /**
   * Graceful stop: not ready, stops listening, answers what still arrives on open
   * connections with 503 `shutting_down`, lets in-flight requests finish until `deadline`
   * (then ends them with `shutting_down`), and closes. Without a context, nothing waits.
   */
  stop(context?: StopContext): Promise<void>;
}

/**
 * Watches the configuration intake reads into memory, builds the app on a reply mux over the
 * bus and starts listening. In-flight requests fail at once with a clear error when the bus
 * connection drops, instead of waiting for their timeout.
 */
export async function startIntake(deps: StartIntakeDeps): Promise<Intake> {
  const { bus, config } = deps;
  const keyStore = createKeyStoreStatus(config.ZML_KEY_STORE_MAX_STALE_MS);
  const auth = createAuthenticator(keyStore);
  const rateLimiter = createRateLimiter();
  const state = await watchIntakeState(bus, deps.log, {
    auth,
    keyStore,
    rateLimiter,
    clock: deps.clock,
  });
  const allowlist = await watchAllowlistFeed(bus, deps.log);
  // The mux learns from each request's first frame (or its `accept`) which dispatcher serves
  // it; the follower ends those requests when that dispatcher's beats stop (or it leaves).
  // Such frames only arrive for requests sent once both exist.
  const mux = createReplyMux(bus, { onAccept: (replica) => dispatchers.accepted(replica) });
  const dispatchers = followDispatchers(bus, {
    lossAfterMs: config.ZML_DISPATCHER_LOSS_MS,
    sweepEveryMs: Math.max(50, Math.min(250, config.ZML_DISPATCHER_LOSS_MS / 4)),
    clock: deps.clock,
    log: deps.log,
    onLost: (replica, reason) => {
      const lost = new ZmlError(
        "dispatcher_lost",
        "the dispatcher serving this request stopped before answering; retry",
        { retryAfterS: 1 },
      );
      const failed = mux.failServedBy(replica, lost);
      if (failed > 0 || reason === "silent") {
        deps.log.warn({ dispatcher: replica, reason, requests: failed }, "dispatcher lost");
      }
    },
    // A dispatcher accepts a request the moment it gets it; one still unaccepted after the
    // loss bound never reached a live one (lost with a killed nats-server or dispatcher), and
    // is re-routed or answered dispatcher_lost like a request whose dispatcher died.
    onSweep: () => {
      const lost = new ZmlError("dispatcher_lost", "no dispatcher accepted this request; retry", {
        retryAfterS: 1,
      });
      const failed = mux.failUnaccepted(config.ZML_DISPATCHER_LOSS_MS, lost);
      if (failed > 0) deps.log.warn({ requests: failed }, "route requests never accepted");
    },
  });
  const unlisten = bus.onConnectionChange((connected) => {
    if (!connected) {
      mux.failAll(
        new ZmlError("bus_unavailable", "message bus connection lost", { retryAfterS: 1 }),
      );
    }
  });
  let draining = false;
  const inFlight = createInFlight();
  const appDeps: IntakeDeps = {
    ...deps,
    mux,
    auth,
    rateLimiter,
    models: state.models.map,
    policies: state.policies.map,
    configStore: createKvConfigStore(deps.adminBus ?? bus),
    allowlist,
    isReady: () => !deps.isStopping?.() && !draining && bus.isConnected(),
    isDraining: () => draining,
    inFlight,
  };
  // With ZML_ADMIN_PORT the admin API, metrics and OpenAPI get a listener of their own.
  const separateAdmin = config.ZML_ADMIN_PORT !== undefined;
  const app = await buildApp(appDeps, separateAdmin ? "public" : "all");
  const adminApp = separateAdmin ? await buildApp(appDeps, "admin") : undefined;
  await app.listen({ host: config.ZML_HOST, port: config.ZML_PORT });
  await adminApp?.listen({ host: config.ZML_ADMIN_HOST, port: config.ZML_ADMIN_PORT });
  const scheme = deps.tls ? "https" : "http";
  const urlOf = (host: string, a: typeof app) =>
    `${scheme}://${host}:${(a.server.address() as { port: number }).port}`;
  return {
    app,
    url: urlOf(config.ZML_HOST, app),
    adminUrl: adminApp ? urlOf(config.ZML_ADMIN_HOST, adminApp) : undefined,
    async stop(context) {
      // Not ready from here on (also when the caller's own flag did not say so already).
      draining = true;
      // Stop listening; open connections finish what they carry.
      const closed = Promise.all([app.close(), adminApp?.close()]);
      const deadline = context?.deadline ?? deps.clock();
      const finished = await waitUntil(() => inFlight.count() === 0, deadline, deps.clock);
      if (!finished) {
        deps.log.warn({ in_flight: inFlight.count() }, "requests still running at stop");
        // Each gets a retryable answer with a body (or an error event mid-stream), never
        // a bare cut.
        mux.failAll(
          new ZmlError("shutting_down", "this gateway replica is stopping", { retryAfterS: 1 }),
        );
        await waitUntil(() => inFlight.count() === 0, deps.clock() + 1_000, deps.clock);
      }
      // A keep-alive client may have sent its next request on a connection just as the last
      // answer went out: requests already on the wire get their 503 (with `Connection:
      // close`) instead of a reset.
      await new Promise((resolve) => setTimeout(resolve, LINGER_AFTER_LAST_ANSWER_MS));
      await waitUntil(() => inFlight.count() === 0, deps.clock() + 1_000, deps.clock);
      // Nothing is being answered now: keep-alive connections (a client's pool, a prober)
      // would otherwise hold the listener open until they idle out.
      for (const a of [app, adminApp]) if (a) closeAllConnections(a.server);
      await closed;
      unlisten();
      dispatchers.stop();
      mux.close();
      state.stop();
      allowlist.stop();
    },
  };
}
