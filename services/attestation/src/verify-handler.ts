// Serves `zml.attestation.verify`: every request gets a reply, an error one for bad input.
import { decodeJson, encodeJson, extractTraceContext } from "@zml/bus";
import type { Bus, BusLogger, Msg, Subscription } from "@zml/bus";
import {
  ATTESTATION_QUEUE_GROUP,
  ATTESTATION_VERIFY_SUBJECT,
  AttestationVerifyReplySchema,
  AttestationVerifyRequestSchema,
} from "@zml/contracts";
import type { AttestationVerifyReply } from "@zml/contracts";
import { context, SpanStatusCode, trace } from "@zml/telemetry";
import type { AttestationService } from "./attestation-service.ts";
import type { AttestationMetrics } from "./metrics.ts";

const tracer = trace.getTracer("zml-attestation");

function outcomeOf(reply: AttestationVerifyReply): string {
  return "error" in reply ? reply.error.code : "result";
}

export function serveVerify(
  bus: Bus,
  service: AttestationService,
  options: { log: BusLogger; metrics: AttestationMetrics },
): Subscription {
  const respond = (msg: Msg, reply: AttestationVerifyReply) => {
    options.metrics.verifyRequests.inc({ outcome: outcomeOf(reply) });
    msg.respond(encodeJson(ATTESTATION_VERIFY_SUBJECT, AttestationVerifyReplySchema, reply));
  };
  const handle = async (msg: Msg) => {
    let request;
    try {
      request = decodeJson(msg.subject, AttestationVerifyRequestSchema, msg.data);
    } catch (error) {
      respond(msg, {
        type: "attestation.verify.reply.v1",
        error: { code: "invalid_request", message: String(error) },
      });
      return;
    }
    await tracer.startActiveSpan("attestation.verify", async (span) => {
      span.setAttribute("zml.node_id", request.node_id);
      span.setAttribute("zml.attestation.session_key", request.session_key === true);
      try {
        const reply = await service.verify(request.node_id, {
          nonce: request.nonce,
          fresh: request.fresh,
          sessionKey: request.session_key,
        });
        span.setAttribute("zml.attestation.outcome", outcomeOf(reply));
        if ("result" in reply) span.setAttribute("zml.attestation.ok", reply.result.ok);
        respond(msg, reply);
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        throw error;
      } finally {
        span.end();
      }
    });
  };
  return bus.nc.subscribe(ATTESTATION_VERIFY_SUBJECT, {
    queue: ATTESTATION_QUEUE_GROUP,
    callback: (err, msg) => {
      if (err) {
        options.log.error({ err: String(err) }, "verify subscription error");
        return;
      }
      if (!msg.reply) return;
      context.with(extractTraceContext(msg.headers), () => {
        handle(msg).catch((error: unknown) => {
          options.log.error({ err: String(error) }, "verify request failed");
        });
      });
    },
  });
}
