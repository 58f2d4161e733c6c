import { NODE_QUOTE_PATH } from "@zml/contracts";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ControlRoutes } from "./control-routes.ts";
import { methodNotAllowed, notFound, sendJson } from "./http-reply.ts";
import type { InferencePath } from "./inference-routes.ts";
import type { ModelRoutes } from "./model-routes.ts";
import { errorBodyJson } from "./openai-request.ts";
import type { ProbeRoutes } from "./probe-routes.ts";

const MODEL_PATH_PREFIX = "/v1/models/";

/** The handlers of the node's API, one module per concern. */
export interface SimRoutes {
  inference(req: IncomingMessage, res: ServerResponse, path: InferencePath): Promise<void>;
  probes: ProbeRoutes;
  models: ModelRoutes;
  quote(req: IncomingMessage, res: ServerResponse): void;
  control: ControlRoutes;
  /** Engine nodes: vLLM's `POST /reset_prefix_cache`; undefined: the path is unknown. */
  resetPrefixCache: (() => void) | undefined;
}

/**
 * Answers each request with the handler for its path and method (README, "HTTP API"). A
 * handler that throws costs that one request a 500 (or its connection, once the head is
 * sent), never the node.
 */
export function createRouter(
  routes: SimRoutes,
): (req: IncomingMessage, res: ServerResponse) => void {
  function route(req: IncomingMessage, res: ServerResponse): Promise<void> | void {
    const url = req.url ?? "/";
    const query = url.indexOf("?");
    const path = query === -1 ? url : url.slice(0, query);
    const method = req.method;
    switch (path) {
      case "/v1/chat/completions":
      case "/v1/completions":
      case "/v1/responses":
      case "/v1/embeddings":
        if (method !== "POST") return methodNotAllowed(res);
        return routes.inference(req, res, path);
      case "/health":
        return method === "GET" ? routes.probes.health(res) : methodNotAllowed(res);
      case "/metrics":
        return method === "GET" ? routes.probes.metrics(res) : methodNotAllowed(res);
      case "/slots":
        return method === "GET" ? routes.probes.slots(res) : methodNotAllowed(res);
      case "/v1/models":
        return method === "GET" ? routes.models.list(res) : methodNotAllowed(res);
      case NODE_QUOTE_PATH:
        return routes.quote(req, res);
      case "/_sim/fault":
        return routes.control.fault(req, res);
      case "/_sim/config":
        return routes.control.config(req, res);
      case "/_sim/stats":
        return method === "GET" ? routes.control.stats(res) : methodNotAllowed(res);
      case "/_sim/reset-stats":
        return method === "POST" ? routes.control.resetStats(res) : methodNotAllowed(res);
      case "/reset_prefix_cache":
        if (routes.resetPrefixCache === undefined) return notFound(res);
        if (method !== "POST") return methodNotAllowed(res);
        // vLLM answers an empty 200.
        routes.resetPrefixCache();
        res.writeHead(200, { "content-length": 0 });
        res.end();
        return;
      default:
        if (path.startsWith(MODEL_PATH_PREFIX) && method === "GET") {
          return routes.models.one(res, decodeURIComponent(path.slice(MODEL_PATH_PREFIX.length)));
        }
        return notFound(res);
    }
  }

  return (req, res) => {
    try {
      const pending = route(req, res);
      if (pending !== undefined) pending.catch(() => failed(res));
    } catch {
      failed(res);
    }
  };
}

function failed(res: ServerResponse): void {
  if (res.headersSent) res.destroy();
  else sendJson(res, 500, errorBodyJson({ status: 500, message: "simulator error", param: null }));
}
