import type { ServerResponse } from "node:http";
import type { FaultSlot } from "./fault-slot.ts";
import type { GenerationContext } from "./generation.ts";
import { sendJson } from "./http-reply.ts";

/** What the gateway polls: `GET /health` and the Prometheus `GET /metrics`. */
export interface ProbeRoutes {
  health(res: ServerResponse): void;
  metrics(res: ServerResponse): void;
}

/** `generation`: the node's slots, settings and metrics, read at each scrape. */
export function createProbeRoutes(faults: FaultSlot, generation: GenerationContext): ProbeRoutes {
  return {
    health(res) {
      if (faults.take("health") === null) {
        res.writeHead(200, { "content-length": 0 });
        res.end();
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
      const text = generation.metrics.render({
        running: load.running,
        waiting: load.waiting,
        maxConcurrency: generation.config.maxConcurrency,
        batchTokens: generation.batchTokens,
        ...(engine === undefined ? {} : { engine }),
      });
      res.writeHead(200, {
        "content-type": "text/plain; version=0.0.4; charset=utf-8",
        "content-length": Buffer.byteLength(text),
      });
      res.end(text);
    },
  };
}
