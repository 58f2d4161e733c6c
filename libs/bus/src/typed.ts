import type { Msg, MsgHdrs, Subscription } from "@nats-io/nats-core";
import { context } from "@opentelemetry/api";
import type { z } from "zod";
import type { Bus, BusLogger } from "./connection.ts";
import { decodeJson, encodeJson } from "./json-codec.ts";
import { extractTraceContext, injectTraceContext } from "./trace-context.ts";

/** Publishes a schema-checked JSON message with the active trace context in its headers. */
export function publishJson<S extends z.ZodType>(
  bus: Bus,
  subject: string,
  schema: S,
  value: z.input<S>,
  headers?: MsgHdrs,
): void {
  bus.nc.publish(subject, encodeJson(subject, schema, value), {
    headers: injectTraceContext(headers),
  });
}

export interface SubscribeJsonOptions {
  queue?: string;
  log: BusLogger;
}

/**
 * Subscribes to schema-checked JSON messages. Invalid messages are logged and dropped (never
 * crash the subscriber); the handler runs inside the sender's trace context.
 */
export function subscribeJson<S extends z.ZodType>(
  bus: Bus,
  subject: string,
  schema: S,
  handler: (value: z.output<S>, msg: Msg) => void | Promise<void>,
  options: SubscribeJsonOptions,
): Subscription {
  return bus.nc.subscribe(subject, {
    ...(options.queue ? { queue: options.queue } : {}),
    callback: (err, msg) => {
      if (err) {
        options.log.error({ err: String(err), subject }, "subscription error");
        return;
      }
      let value: z.output<S>;
      try {
        value = decodeJson(msg.subject, schema, msg.data);
      } catch (e) {
        options.log.warn({ err: String(e), subject: msg.subject }, "dropped invalid message");
        return;
      }
      context.with(extractTraceContext(msg.headers), () => {
        Promise.resolve(handler(value, msg)).catch((e: unknown) => {
          options.log.error({ err: String(e), subject: msg.subject }, "message handler failed");
        });
      });
    },
  });
}
