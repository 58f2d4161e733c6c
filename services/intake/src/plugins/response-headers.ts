import type { FastifyInstance } from "fastify";
import fp from "fastify-plugin";

/** Headers on every answer: the request id, and no content sniffing. */
export const responseHeaders = fp(
  (app: FastifyInstance, _options: object, done: (err?: Error) => void) => {
    app.addHook("onSend", (req, reply, payload, next) => {
      reply.header("x-request-id", req.id);
      // Node answers are relayed from the gateway's origin: never let a browser sniff them.
      reply.header("x-content-type-options", "nosniff");
      next(null, payload);
    });
    done();
  },
  { name: "zml-response-headers" },
);
