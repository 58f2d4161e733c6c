import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";
import type { Logger } from "pino";

export interface OpsServerOptions {
  /** Interface to bind; defaults to `127.0.0.1`. Deployments pass `0.0.0.0` for probes. */
  host?: string;
  /** TCP port; `0` picks a free one (read it back from the result). */
  port: number;
  registry: Registry;
  /** Readiness: `true` once the service can do its job (bus connected, state loaded, …). */
  isReady: () => boolean;
  log: Logger;
}

export interface OpsServer {
  /** The port actually bound. */
  port: number;
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:9464`. */
  url: string;
  /** Stops listening and drops open keep-alive connections. */
  close(): Promise<void>;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    "cache-control": "no-store",
  });
  res.end(text);
}

async function sendMetrics(res: ServerResponse, registry: Registry): Promise<void> {
  const text = await registry.metrics();
  res.writeHead(200, {
    "content-type": registry.contentType,
    "content-length": Buffer.byteLength(text),
    "cache-control": "no-store",
  });
  res.end(text);
}

function urlHost(host: string): string {
  if (host === "0.0.0.0" || host === "") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

/**
 * Starts the small HTTP server for probes and scraping:
 *
 * - `GET /healthz` → 200 `{"status":"ok"}` while the process runs (liveness);
 * - `GET /readyz` → 200 `{"status":"ready"}` or 503 `{"status":"not_ready"}` from `isReady()`
 *   (a throwing `isReady` counts as not ready);
 * - `GET /metrics` → the registry in Prometheus text format;
 * - other methods on these paths → 405, any other path → 404, both as JSON.
 *
 * `HEAD` is answered like `GET`, without a body. Query strings are ignored.
 */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const { registry, isReady, log } = options;
  const host = options.host ?? "127.0.0.1";

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? "/").split("?", 1)[0];
    if (path !== "/healthz" && path !== "/readyz" && path !== "/metrics") {
      sendJson(res, 404, { status: "not_found" });
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("allow", "GET, HEAD");
      sendJson(res, 405, { status: "method_not_allowed" });
      return;
    }
    if (path === "/healthz") {
      sendJson(res, 200, { status: "ok" });
    } else if (path === "/readyz") {
      let ready = false;
      try {
        ready = isReady();
      } catch (err) {
        log.warn({ err }, "readiness check threw");
      }
      sendJson(res, ready ? 200 : 503, { status: ready ? "ready" : "not_ready" });
    } else {
      await sendMetrics(res, registry);
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      log.error({ err, path: req.url }, "ops request failed");
      if (!res.headersSent) sendJson(res, 500, { status: "error" });
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  server.on("error", (err) => log.error({ err }, "ops server error"));

  const port = (server.address() as AddressInfo).port;
  let closed: Promise<void> | undefined;
  return {
    port,
    url: `http://${urlHost(host)}:${port}`,
    close() {
      closed ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Scrapers keep connections alive; without this close() would wait for them.
        server.closeAllConnections();
      });
      return closed;
    },
  };
}
