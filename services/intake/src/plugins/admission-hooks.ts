import type { Http2ServerRequest } from "node:http2";
import { ZmlError } from "@zml/contracts";
import type { FastifyInstance } from "fastify";
import fp from "fastify-plugin";
import { createAuthThrottle } from "../admission/auth-throttle.ts";
import { isHttp2, sendError } from "../http/errors.ts";
import type { InFlight } from "../relay/in-flight.ts";

export interface AdmissionHooksOptions {
  /** Failed authentications an address may have in a row before it is throttled. */
  authFailureBurst: number;
  /** Failed authentications a minute an address may have after that. */
  authFailuresPerMinute: number;
  clock: () => number;
  /** True once a stop began: client and admin calls get 503 `shutting_down` with a body. */
  isDraining?: (() => boolean) | undefined;
  /** Counts the requests being answered, for a graceful stop. */
  inFlight?: InFlight | undefined;
}

/** Routes that take a credential; ops routes (`/healthz`, `/metrics`, …) are never throttled. */
const AUTHENTICATED_PREFIXES = ["/v1/", "/admin/"];

/**
 * Every request's admission checks, in order, in one callback hook (one hook call, no
 * promise per request): a body HTTP/2 did not announce, the authentication throttle, the
 * in-flight count and a stopping replica. A check that answers sends its reply and ends the
 * chain there. Each 401 answered counts as a failed authentication of its address.
 */
export const admissionHooks = fp(
  (app: FastifyInstance, options: AdmissionHooksOptions, done: (err?: Error) => void) => {
    const { clock } = options;
    // Brute force: an address that failed authentication too often is refused for a while.
    const authThrottle = createAuthThrottle({
      burst: options.authFailureBurst,
      perMinute: options.authFailuresPerMinute,
      maxAddresses: 100_000,
    });
    app.addHook("onRequest", (req, reply, next) => {
      // An HTTP/2 body need not announce its length, and fastify takes a request with neither
      // Content-Type nor Content-Length for bodiless; the stream itself says whether data
      // follows.
      if (isHttp2(req) && req.headers["content-type"] === undefined) {
        const { stream } = req.raw as unknown as Http2ServerRequest;
        if (!stream.endAfterHeaders) req.headers["content-type"] = "application/octet-stream";
      }
      const authenticated = AUTHENTICATED_PREFIXES.some((p) => req.url.startsWith(p));
      const wait = authenticated ? authThrottle.blockedFor(req.ip, clock()) : undefined;
      if (wait !== undefined) {
        const message = "too many failed authentications from this address; retry later";
        sendError(
          reply,
          new ZmlError("auth_throttled", message, { param: "authorization", retryAfterS: wait }),
        );
        return;
      }
      options.inFlight?.track(reply.raw);
      // While stopping, what the listener still receives (a keep-alive connection's next
      // request) gets a retryable 503 with a body and `Connection: close`; in-flight requests
      // finish. Probes keep answering, `/readyz` with not-ready.
      if (options.isDraining?.()) {
        // Keep-alive clients reconnect, and so find a replica that is not stopping.
        if (!isHttp2(req)) reply.header("connection", "close");
        if (authenticated) {
          const message = "this gateway replica is stopping; retry";
          sendError(reply, new ZmlError("shutting_down", message, { retryAfterS: 1 }));
          return;
        }
      }
      next();
    });
    app.addHook("onResponse", (req, reply, next) => {
      if (reply.statusCode === 401) authThrottle.recordFailure(req.ip, clock());
      next();
    });
    done();
  },
  { name: "zml-admission-hooks" },
);
