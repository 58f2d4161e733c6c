import { context } from "@opentelemetry/api";
import { createReplyWriter, extractTraceContext, headerOf } from "@zml/bus";
import type { AcceptAnnouncer, Msg } from "@zml/bus";
import { HEADERS, MESSAGE_TYPES, ZmlError } from "@zml/contracts";
import type { Cancellations } from "./cancellations.ts";
import { executeRoute } from "./execute-route.ts";
import type { ExecuteDeps } from "./execution.ts";
import { readRouteHeaders } from "./route-headers.ts";

export interface RouteHandlerDeps extends ExecuteDeps {
  cancellations: Cancellations;
  /** This replica's id, named on the first frame of every answer. */
  replica: string;
  /** Sends `accept` for requests whose first frame is slow to come. */
  accepts: AcceptAnnouncer;
}

/** Serves one `route.request` message: the answer goes back as frames to its reply inbox. */
export function createRouteHandler(deps: RouteHandlerDeps): (msg: Msg) => Promise<void> {
  return async (msg) => {
    if (!msg.reply) return; // a request nobody waits for
    // A requester that names a batch subject takes its frames batched with other streams'.
    const writer = createReplyWriter(deps.bus, msg.reply, {
      replica: deps.replica,
      batchSubject: headerOf(msg.headers, HEADERS.replyBatch) || undefined,
    });
    let request;
    try {
      request = readRouteHeaders(msg.headers, deps.clock(), MESSAGE_TYPES.routeRequestV1);
    } catch (err) {
      const error = err instanceof ZmlError ? err : new ZmlError("internal_error", "bad request");
      // Intake never sends these: one here is a bug or a forged request, worth a trace.
      deps.log.warn({ code: error.code, param: error.param }, "route request refused");
      writer.error(error.toBody());
      return;
    }
    // Intake follows this replica's liveness for this request from its first frame on, or
    // from an `accept` should that frame be slow (a slow node, a wait for capacity). A
    // request answered at once costs no extra message.
    const untrack = deps.accepts.track(msg.reply, writer);
    const cancelled = deps.cancellations.register(msg.reply);
    try {
      await context.with(extractTraceContext(msg.headers), () =>
        executeRoute(deps, { request, body: msg.data, writer, cancelled, waitForCapacity: true }),
      );
    } finally {
      untrack();
      deps.cancellations.release(msg.reply);
    }
  };
}
