import type { Msg, Subscription } from "@nats-io/nats-core";
import { ZmlError } from "@zml/contracts";
import type { JsonEndpoint } from "@zml/contracts";
import type { z } from "zod";
import { natsConnectionOf } from "./connection.ts";
import type { Bus, BusLogger } from "./connection.ts";
import { decodeJson, encodeJson } from "./json-codec.ts";
import { injectTraceContext } from "./trace-context.ts";
import { subscribeMessages } from "./typed.ts";

export interface RequestJsonOptions {
  timeoutMs: number;
  /** Who answers, for error messages (e.g. "the attestation service"). */
  service: string;
}

/**
 * One JSON request-reply over the bus, validated both ways, carrying the trace context.
 * A bus that is down or has nobody serving the subject is `bus_unavailable` (503, retry
 * after 1 s); no answer in time is `gateway_timeout` (504). A reply that breaks its schema
 * throws {@link MessageValidationError}.
 */
export async function requestJson<Req extends z.ZodType, Rep extends z.ZodType>(
  bus: Bus,
  endpoint: JsonEndpoint<Req, Rep>,
  request: z.input<Req>,
  options: RequestJsonOptions,
): Promise<z.output<Rep>> {
  if (!bus.isConnected()) {
    throw new ZmlError("bus_unavailable", "gateway is reconnecting to its message bus", {
      retryAfterS: 1,
    });
  }
  const data = encodeJson(endpoint.subject, endpoint.request, request);
  let reply: Msg;
  try {
    reply = await natsConnectionOf(bus).request(endpoint.subject, data, {
      timeout: options.timeoutMs,
      headers: injectTraceContext(),
    });
  } catch (err) {
    const e = err as Error & { isNoResponders?: () => boolean };
    if (e.name === "TimeoutError") {
      throw new ZmlError("gateway_timeout", `${options.service} did not answer in time`);
    }
    const why = e.isNoResponders?.() === true ? "is not running" : "could not be reached";
    throw new ZmlError("bus_unavailable", `${options.service} ${why}`, { retryAfterS: 1 });
  }
  return decodeJson(endpoint.subject, endpoint.reply, reply.data);
}

export interface ServeJsonOptions<Rep extends z.ZodType> {
  log: BusLogger;
  /** Called with every reply sent, e.g. to count outcomes. */
  onReply?: (reply: z.input<Rep>) => void;
}

/**
 * Serves an endpoint in its queue group. Every request that waits for an answer gets one:
 * the handler's, or `{ type: replyType, error }` with `invalid_request` for a request that
 * breaks its schema and `internal_error` when the handler throws. (A reply schema that does
 * not allow `internal_error` makes that last case a logged failure without a reply.) The
 * handler runs in the requester's trace context.
 */
export function serveJson<Req extends z.ZodType, Rep extends z.ZodType>(
  bus: Bus,
  endpoint: JsonEndpoint<Req, Rep>,
  handler: (request: z.output<Req>) => Promise<z.input<Rep>>,
  options: ServeJsonOptions<Rep>,
): Subscription {
  const { subject } = endpoint;
  const respond = (msg: Msg, reply: z.input<Rep>) => {
    options.onReply?.(reply);
    msg.respond(encodeJson(subject, endpoint.reply, reply));
  };
  const respondError = (msg: Msg, error: ZmlError) =>
    respond(msg, { type: endpoint.replyType, error: error.toBody() } as z.input<Rep>);

  return subscribeMessages(
    bus,
    subject,
    async (msg) => {
      if (!msg.reply) return; // nobody waits for an answer
      let request: z.output<Req>;
      try {
        request = decodeJson(subject, endpoint.request, msg.data);
      } catch (error) {
        respondError(msg, new ZmlError("invalid_request", String(error)));
        return;
      }
      try {
        respond(msg, await handler(request));
      } catch (error) {
        options.log.error({ err: String(error), subject }, "request handler failed");
        respondError(msg, new ZmlError("internal_error", `${subject} request failed`));
      }
    },
    { queue: endpoint.queue, log: options.log },
  );
}
