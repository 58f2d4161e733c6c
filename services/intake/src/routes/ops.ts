import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";

export interface OpsRouteDeps {
  registry: Registry;
  isReady: () => boolean;
  /** The OpenAPI document, built once. */
  openApi: object;
}

/** Liveness, readiness, Prometheus metrics and the OpenAPI document: no credentials. */
export function opsRoutes(deps: OpsRouteDeps) {
  return (app: FastifyInstance) => {
    app.get("/healthz", () => ({ status: "ok" }));
    app.get("/readyz", (_req, reply) =>
      deps.isReady() ? { status: "ready" } : reply.code(503).send({ status: "not_ready" }),
    );
    app.get("/metrics", async (_req, reply) =>
      reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
    );
    app.get("/openapi.json", () => deps.openApi);
  };
}
