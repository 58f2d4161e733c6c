import { context } from "@opentelemetry/api";
import { createReplyWriter, extractTraceContext, sendAccept } from "@zml/bus";
import type { Msg } from "@zml/bus";
import { MESSAGE_TYPES, ZmlError } from "@zml/contracts";
import type { Cancellations } from "./cancellations.ts";
import { executeRoute } from "./execute-route.ts";
import type { ExecuteDeps } from "./execute-route.ts";
import { readRouteHeaders } from "./route-headers.ts";

export interface RouteHandlerDeps extends ExecuteDeps {
  cancellations: Cancellations;
  /** This replica's id, named in the `accept` frame every request gets first. */
  replica: string;
}

/** Serves one `route.request` message: the answer goes back as frames to its reply inbox. */
export function createRouteHandler(deps: RouteHandlerDeps): (msg: Msg) => Promise<void> {
  return async (msg) => {
    if (!msg.reply) return; // a request nobody waits for
    const writer = createReplyWriter(deps.bus, msg.reply);
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
    // Before any answer frame: intake follows this replica's liveness for this request from
    // here on. (A refused request above ends at once, with its error as its only frame.)
    sendAccept(deps.bus, msg.reply, deps.replica);
    const cancelled = deps.cancellations.register(msg.reply);
    try {
      await context.with(extractTraceContext(msg.headers), () =>
        executeRoute(deps, { request, body: msg.data, writer, cancelled, waitForCapacity: true }),
      );
    } finally {
      deps.cancellations.release(msg.reply);
    }
  };
}
