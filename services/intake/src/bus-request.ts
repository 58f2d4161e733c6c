import { decodeJson, encodeJson, injectTraceContext } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { ZmlError } from "@zml/contracts";
import type { z } from "zod";

export interface BusRequest<Req extends z.ZodType, Rep extends z.ZodType> {
  subject: string;
  requestSchema: Req;
  replySchema: Rep;
  request: z.input<Req>;
  timeoutMs: number;
  /** Who answers, for error messages (e.g. "the attestation service"). */
  service: string;
}

/**
 * One JSON request-reply on the bus, validated both ways, carrying the trace context. A
 * bus that is down or has nobody serving the subject is `bus_unavailable` (503); no answer
 * in time is `gateway_timeout` (504).
 */
export async function requestReply<Req extends z.ZodType, Rep extends z.ZodType>(
  bus: Bus,
  r: BusRequest<Req, Rep>,
): Promise<z.output<Rep>> {
  if (!bus.isConnected()) {
    throw new ZmlError("bus_unavailable", "gateway is reconnecting to its message bus", null, 1);
  }
  let data: Uint8Array;
  try {
    const msg = await bus.nc.request(r.subject, encodeJson(r.subject, r.requestSchema, r.request), {
      timeout: r.timeoutMs,
      headers: injectTraceContext(),
    });
    data = msg.data;
  } catch (err) {
    const e = err as Error & { isNoResponders?: () => boolean };
    if (e.name === "TimeoutError") {
      throw new ZmlError("gateway_timeout", `${r.service} did not answer in time`);
    }
    const why = e.isNoResponders?.() === true ? "is not running" : "could not be reached";
    throw new ZmlError("bus_unavailable", `${r.service} ${why}`, null, 1);
  }
  return decodeJson(r.subject, r.replySchema, data);
}
