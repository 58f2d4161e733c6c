import type { FastifyReply, FastifyRequest, RequestPayload } from "fastify";
import { BodyTimeoutError, isHttp2 } from "../http/errors.ts";

/**
 * A `preParsing` hook that bounds how long a request body may take to arrive, the same
 * for HTTP/1.1 and HTTP/2 (Node's own `requestTimeout` only covers HTTP/1.1). A body still
 * incomplete at the deadline fails the parse with {@link BodyTimeoutError}, which the
 * error handler answers with 408.
 *
 * Fastify reads the request itself (no second stream: a `PassThrough` with its pipe cost
 * every request a dozen objects and listeners). At the deadline the error goes to the
 * reader's `error` listener; the request is not destroyed, since the 408 must still go out
 * on it.
 */
export function bodyDeadline(timeoutMs: number) {
  return (
    req: FastifyRequest,
    reply: FastifyReply,
    payload: RequestPayload,
    done: (err: Error | null, stream: RequestPayload) => void,
  ) => {
    // A body the HTTP parser has already read to its end cannot be late. HTTP/1.1 only: an
    // HTTP/2 request also counts as complete when its stream was aborted.
    if (!isHttp2(req) && req.raw.complete) {
      done(null, payload);
      return;
    }
    const timer = setTimeout(() => {
      // Only while someone reads the body (fastify's reader, or the drain of an unread
      // one): an `error` nobody listens to would throw.
      if (!payload.readableEnded && payload.listenerCount("error") > 0) {
        payload.emit("error", new BodyTimeoutError());
      }
    }, timeoutMs);
    const clear = () => clearTimeout(timer);
    payload.once("end", clear);
    reply.raw.once("close", clear);
    done(null, payload);
  };
}
