import { context, propagation } from "@opentelemetry/api";
import type { Context, TextMapGetter, TextMapSetter } from "@opentelemetry/api";
import type { MsgHdrs } from "@nats-io/nats-core";
import { createHeaders, headerOf } from "./fast-headers.ts";

const setter: TextMapSetter<MsgHdrs> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

const getter: TextMapGetter<MsgHdrs | undefined> = {
  get(carrier, key) {
    return headerOf(carrier, key) || undefined;
  },
  keys(carrier) {
    return carrier ? carrier.keys() : [];
  },
};

/**
 * Writes the W3C trace context of `ctx` (default: the active context) into NATS headers,
 * creating them when absent. With no OpenTelemetry SDK registered this adds nothing.
 */
export function injectTraceContext(headers?: MsgHdrs, ctx: Context = context.active()): MsgHdrs {
  const h = headers ?? createHeaders();
  propagation.inject(ctx, h, setter);
  return h;
}

/** Reads the W3C trace context carried by a NATS message into an OpenTelemetry context. */
export function extractTraceContext(headers: MsgHdrs | undefined): Context {
  return propagation.extract(context.active(), headers, getter);
}
