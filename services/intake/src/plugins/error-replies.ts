import { ZmlError } from "@zml/contracts";
import type { FastifyInstance } from "fastify";
import fp from "fastify-plugin";
import { settleUnreadBody } from "../admission/unread-body.ts";
import { sendError, toZmlError } from "../http/errors.ts";

export interface ErrorRepliesOptions {
  /** The body limit: an oversize body is read up to 4× this before its 413. */
  bodyLimitBytes: number;
  bodyTimeoutMs: number;
}

/**
 * The one error handler: whatever a route throws is answered in the OpenAI error envelope
 * with its code's status, and a path no route serves is 404 `not_found` naming `path`.
 */
export const errorReplies = fp(
  (app: FastifyInstance, options: ErrorRepliesOptions, done: (err?: Error) => void) => {
    app.setErrorHandler(async (err, req, reply) => {
      const error = toZmlError(err);
      if (error.code === "internal_error") req.log.error({ err }, "unhandled error");
      if (error.code === "payload_too_large" || error.code === "request_timeout") {
        await settleUnreadBody(req, reply, {
          maxBytes: 4 * options.bodyLimitBytes,
          timeoutMs: options.bodyTimeoutMs,
          // A slow body stays slow: only an oversize one is worth reading to its end.
          waitForEnd: error.code === "payload_too_large",
        });
      }
      return sendError(reply, error);
    });
    app.setNotFoundHandler((req, reply) =>
      sendError(
        reply,
        new ZmlError("not_found", `no route for ${req.method} ${req.url}`, { param: "path" }),
      ),
    );
    done();
  },
  { name: "zml-error-replies" },
);
