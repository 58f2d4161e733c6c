// Serves `zml.attestation.verify`: every request gets a reply, an error one for bad input.
import { serveJson } from "@zml/bus";
import type { Bus, BusLogger, Subscription } from "@zml/bus";
import { ATTESTATION_VERIFY_ENDPOINT } from "@zml/contracts";
import type { AttestationVerifyReplySchema } from "@zml/contracts";
import { SpanStatusCode, trace } from "@zml/telemetry";
import type { WorkCounter } from "@zml/runtime";
import type { AttestationService } from "./attestation-service.ts";
import type { AttestationMetrics } from "./metrics.ts";
import type { z } from "zod";

const tracer = trace.getTracer("zml-attestation");

function outcomeOf(reply: z.input<typeof AttestationVerifyReplySchema>): string {
  return "error" in reply ? reply.error.code : "result";
}

export function serveVerify(
  bus: Bus,
  service: AttestationService,
  options: {
    log: BusLogger;
    metrics: AttestationMetrics;
    /** Counts verifications in progress, so a stop can let them finish. */
    inFlight?: WorkCounter;
  },
): Subscription {
  const counted = <T>(work: () => Promise<T>) => options.inFlight?.run(work) ?? work();
  return serveJson(
    bus,
    ATTESTATION_VERIFY_ENDPOINT,
    (request) =>
      counted(() =>
        tracer.startActiveSpan("attestation.verify", async (span) => {
          span.setAttribute("zml.node_id", request.node_id);
          span.setAttribute("zml.attestation.session_key", request.session_key === true);
          try {
            const reply = await service.verify(request.node_id, {
              nonce: request.nonce,
              fresh: request.fresh,
              sessionKey: request.session_key,
              sessionTtlS: request.session_ttl_s,
            });
            span.setAttribute("zml.attestation.outcome", outcomeOf(reply));
            if ("result" in reply) span.setAttribute("zml.attestation.ok", reply.result.ok);
            return reply;
          } catch (error) {
            span.setStatus({ code: SpanStatusCode.ERROR });
            throw error;
          } finally {
            span.end();
          }
        }),
      ),
    {
      log: options.log,
      onReply: (reply) => options.metrics.verifyRequests.inc({ outcome: outcomeOf(reply) }),
    },
  );
}
