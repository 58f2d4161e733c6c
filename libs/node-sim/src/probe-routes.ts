import type { ServerResponse } from "node:http";
import type { FaultSlot } from "./fault-slot.ts";
import type { GenerationContext } from "./generation.ts";
import { notFound, sendJson } from "./http-reply.ts";

/**
 * What the gateway polls: `GET /health`, the Prometheus `GET /metrics` and, on a llama.cpp
 * node, `GET /slots`.
 */
export interface ProbeRoutes {
  health(res: ServerResponse): void;
  metrics(res: ServerResponse): void;
  slots(res: ServerResponse): void;
}

/** The context of each simulated llama.cpp slot, in tokens (`n_ctx` in `/slots`). */
export const LLAMACPP_SLOT_CONTEXT = 4096;

/** `generation`: the node's slots, settings and metrics, read at each scrape. */
export function createProbeRoutes(faults: FaultSlot, generation: GenerationContext): ProbeRoutes {
  return {
    health(res) {
      const llamacpp = generation.flavour === "llamacpp";
      if (faults.take("health") === null) {
        if (llamacpp) return sendJson(res, 200, '{"status":"ok"}');
        res.writeHead(200, { "content-length": 0 });
        res.end();
      } else if (llamacpp) {
        // What llama-server answers on every path while its model loads.
        sendJson(
          res,
          503,
          '{"error":{"message":"Loading model","type":"unavailable_error","code":503}}',
        );
      } else if (generation.flavour === "tgi") {
        sendJson(res, 503, '{"error":"unhealthy","error_type":"healthcheck"}');
      } else {
        res.writeHead(503, { "content-length": 0 });
        res.end();
      }
    },
    metrics(res) {
      const engine = generation.engine?.counters();
      const load = engine ?? generation.gate;
      generation.metrics
        .render({
          running: load.running,
          waiting: load.waiting,
          maxConcurrency: generation.config.maxConcurrency,
          batchTokens: generation.batchTokens,
          ...(engine === undefined ? {} : { engine }),
        })
        .then(
          (text) => {
            res.writeHead(200, {
              "content-type": "text/plain; version=0.0.4; charset=utf-8",
              "content-length": Buffer.byteLength(text),
            });
            res.end(text);
          },
          (error: unknown) => {
            const message = error instanceof Error ? error.message : String(error);
            res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
            res.end(message);
          },
        );
    },
    slots(res) {
      if (generation.flavour !== "llamacpp") return notFound(res);
      // One slot per request the node runs at once; the busy ones first.
      const running = generation.gate.running;
      const slots = Array.from({ length: generation.config.maxConcurrency }, (_, id) => ({
        id,
        n_ctx: LLAMACPP_SLOT_CONTEXT,
        speculative: false,
        is_processing: id < running,
      }));
      sendJson(res, 200, JSON.stringify(slots));
    },
  };
}
