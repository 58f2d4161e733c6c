import { PassThrough } from "node:stream";
import type { FastifyReply, FastifyRequest, RequestPayload } from "fastify";
import { BodyTimeoutError, isHttp2 } from "./errors.ts";

/**
 * A `preParsing` hook that bounds how long a request body may take to arrive, the same
 * for HTTP/1.1 and HTTP/2 (Node's own `requestTimeout` only covers HTTP/1.1). A body still
 * incomplete at the deadline fails the parse with {@link BodyTimeoutError}, which the
 * error handler answers with 408.
 */
export function bodyDeadline(timeoutMs: number) {
  return (
    req: FastifyRequest,
    reply: FastifyReply,
    payload: RequestPayload,
    done: (err: Error | null, stream: RequestPayload) => void,
  ) => {
    // A body the HTTP parser has already read to its end cannot be late: it goes to the
    // parser as it is, without a second stream, a pipe and a timer (the common case for a
    // body that fits a packet or two). HTTP/1.1 only: an HTTP/2 request also counts as
    // complete when its stream was aborted.
    if (!isHttp2(req) && req.raw.complete) {
      done(null, payload);
      return;
    }
    const out = new PassThrough();
    const timer = setTimeout(() => out.destroy(new BodyTimeoutError()), timeoutMs);
    const clear = () => clearTimeout(timer);
    // Fastify's body reader handles the error; a body nobody reads must not crash on it.
    out.on("error", () => undefined);
    out.once("end", clear);
    out.once("close", clear);
    reply.raw.once("close", clear);
    payload.on("error", (err: Error) => out.destroy(err));
    payload.pipe(out);
    done(null, out);
  };
}
