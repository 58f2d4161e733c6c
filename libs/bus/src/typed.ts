import type { Msg, MsgHdrs, Subscription } from "@nats-io/nats-core";
import { context } from "@opentelemetry/api";
import type { z } from "zod";
import { natsConnectionOf } from "./connection.ts";
import type { Bus, BusLogger } from "./connection.ts";
import { decodeJson, encodeJson } from "./json-codec.ts";
import { decodeHeadersOf } from "./fast-headers.ts";
import { extractTraceContext, injectTraceContext } from "./trace-context.ts";

/** Publishes a schema-checked JSON message with the active trace context in its headers. */
export function publishJson<S extends z.ZodType>(
  bus: Bus,
  subject: string,
  schema: S,
  value: z.input<S>,
  headers?: MsgHdrs,
): void {
  publishBytes(bus, subject, encodeJson(subject, schema, value), headers);
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
  return subscribeMessages(
    bus,
    subject,
    (msg) => {
      let value: z.output<S>;
      try {
        value = decodeJson(msg.subject, schema, msg.data);
      } catch (e) {
        options.log.warn({ err: String(e), subject: msg.subject }, "dropped invalid message");
        return;
      }
      return handler(value, msg);
    },
    options,
  );
}

/**
 * Publishes bytes as they are (no JSON, no schema) with the active trace context in the
 * headers: for messages whose body is someone else's bytes or empty (e.g. `route.cancel`).
 */
export function publishBytes(bus: Bus, subject: string, data: Uint8Array, headers?: MsgHdrs): void {
  natsConnectionOf(bus).publish(subject, data, { headers: injectTraceContext(headers) });
}

/**
 * Subscribes to raw messages (headers and bytes, e.g. `route.request`, whose body is the
 * client's and is never decoded here). The handler runs inside the sender's trace context;
 * a handler that throws or rejects is logged, never crashes the subscriber.
 */
export function subscribeMessages(
  bus: Bus,
  subject: string,
  handler: (msg: Msg) => void | Promise<void>,
  options: SubscribeJsonOptions,
): Subscription {
  return natsConnectionOf(bus).subscribe(subject, {
    ...(options.queue ? { queue: options.queue } : {}),
    callback: (err, msg) => {
      if (err) {
        options.log.error({ err: String(err), subject }, "subscription error");
        return;
      }
      try {
        decodeHeadersOf(msg);
      } catch (e) {
        // A header name or value the NATS client itself would refuse: nothing to handle.
        options.log.error({ err: String(e), subject: msg.subject }, "message with bad headers");
        return;
      }
      context.with(extractTraceContext(msg.headers), () => {
        try {
          Promise.resolve(handler(msg)).catch((e: unknown) => {
            options.log.error({ err: String(e), subject: msg.subject }, "message handler failed");
          });
        } catch (e) {
          options.log.error({ err: String(e), subject: msg.subject }, "message handler failed");
        }
      });
    },
  });
}
