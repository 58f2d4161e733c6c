import type { FastifyInstance } from "fastify";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { AllowlistSchema, buildAllowlist } from "../allowlist/allowlist.ts";
import type { AllowlistFeed } from "../allowlist/feed.ts";
import { ALLOWLIST_PAGE } from "../allowlist/page.ts";
import { EventStreamSchema, json, NO_CREDENTIALS } from "./docs.ts";

export interface AllowlistRouteDeps {
  feed: Pick<AllowlistFeed, "sources" | "onChange">;
  clock: () => number;
  /** A stream re-sends the list at least this often, so expiries show without a change. */
  refreshMs?: number;
}

/**
 * The public allowlist of tier 3–4 nodes, no credentials: `GET /v1/attestation` as JSON, or
 * as a server-sent event stream (`Accept: text/event-stream`) with one `allowlist` event per
 * change; and the human page `GET /allowlist`, which renders the stream live.
 */
export function allowlistRoutes(deps: AllowlistRouteDeps) {
  const refreshMs = deps.refreshMs ?? 5_000;
  return (app: FastifyInstance) => {
    const streams = new Set<() => void>();
    // Open streams would hold the server open on shutdown.
    app.addHook("onClose", (_instance, done) => {
      for (const end of streams) end();
      done();
    });
    app.get("/v1/attestation", (req, reply) => {
      const list = () => buildAllowlist(deps.feed.sources, deps.clock());
      if (!(req.headers.accept ?? "").includes("text/event-stream")) {
        return reply.header("cache-control", "no-store").send(list());
      }
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        "content-type": "text/event-stream",
        "cache-control": "no-store",
        ...(req.raw.httpVersionMajor === 1 ? { connection: "keep-alive" } : {}),
      });
      const send = () => res.write(`event: allowlist\ndata: ${JSON.stringify(list())}\n\n`);
      send();
      const unsubscribe = deps.feed.onChange(send);
      const timer = setInterval(send, refreshMs);
      timer.unref();
      const end = () => res.end();
      streams.add(end);
      res.on("close", () => {
        streams.delete(end);
        unsubscribe();
        clearInterval(timer);
      });
      return reply;
    });
    app.get("/allowlist", (_req, reply) =>
      reply
        .header("content-type", "text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .header(
          "content-security-policy",
          "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        )
        .send(ALLOWLIST_PAGE),
    );
  };
}

/** The public allowlist in the OpenAPI document (the human page is not part of the API). */
export const allowlistPaths: ZodOpenApiPathsObject = {
  "/v1/attestation": {
    get: {
      operationId: "getAllowlist",
      tags: ["trust"],
      summary: "The public allowlist of tier 3–4 nodes and their attestation status",
      security: NO_CREDENTIALS,
      description:
        "No credentials. Every tier 3–4 node: id, tier, models, family, attested " +
        "measurement, TCB status, TLS key hash, attested-at, valid-until and status " +
        "(attested, expired, revoked with its reason, failing). With " +
        "`Accept: text/event-stream`, a stream of `allowlist` events, one per change. " +
        "Rendered live for people at `/allowlist`.",
      responses: {
        "200": {
          description: "The allowlist",
          content: {
            ...json(AllowlistSchema),
            "text/event-stream": { schema: EventStreamSchema },
          },
        },
      },
    },
  },
};
