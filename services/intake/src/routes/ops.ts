import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";

export interface OpsRouteDeps {
  registry: Registry;
  isReady: () => boolean;
  /** Builds the OpenAPI document: called once, and only when `internals` serves it. */
  openApi: () => object;
  /** Serve `/metrics` and `/openapi.json` too (false on a public listener of their own). */
  internals: boolean;
}

/**
 * Liveness and readiness, plus (with `internals`) Prometheus metrics and the OpenAPI
 * document: no credentials, so a deployment that wants them off the public port moves them
 * to the admin listener (`ZML_ADMIN_PORT`).
 */
export function opsRoutes(deps: OpsRouteDeps) {
  return (app: FastifyInstance) => {
    app.get("/healthz", () => ({ status: "ok" }));
    app.get("/readyz", (_req, reply) =>
      deps.isReady() ? { status: "ready" } : reply.code(503).send({ status: "not_ready" }),
    );
    if (!deps.internals) return;
    app.get("/metrics", async (_req, reply) =>
      reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
    );
    const openApi = deps.openApi();
    app.get("/openapi.json", () => openApi);
  };
}
