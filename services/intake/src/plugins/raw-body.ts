import type { FastifyInstance } from "fastify";
import fp from "fastify-plugin";
import { bodyDeadline } from "../admission/body-deadline.ts";

export interface RawBodyOptions {
  /** How long a request body may take to arrive (408 `request_timeout` after). */
  bodyTimeoutMs: number;
}

/**
 * Bodies stay raw bytes: they are forwarded to the node as received. Any content type is
 * accepted and must parse as JSON, so a bare `curl -d` works too. A body that arrives too
 * slowly fails its parse (see `bodyDeadline`).
 */
export const rawBody = fp(
  (app: FastifyInstance, options: RawBodyOptions, done: (err?: Error) => void) => {
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, next) => next(null, body));
    const deadline = bodyDeadline(options.bodyTimeoutMs);
    app.addHook("preParsing", (req, reply, payload, next) => {
      if (req.method === "GET" || req.method === "HEAD") next(null, payload);
      else deadline(req, reply, payload, next);
    });
    done();
  },
  { name: "zml-raw-body" },
);
