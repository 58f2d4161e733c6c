import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";

export interface RecordingProxy {
  url: string;
  /** `METHOD /path` of every request that reached the proxy, in order. */
  seen: string[];
  close(): Promise<void>;
}

/**
 * A plain HTTP reverse proxy on 127.0.0.1 that records every request line it forwards to
 * `target` and streams the answer back unchanged. Put in front of a node, it shows what
 * reached the node; with no target it answers 200 to everything (an attacker's server).
 */
export async function startRecordingProxy(target?: string): Promise<RecordingProxy> {
  const seen: string[] = [];
  const upstream = target === undefined ? undefined : new URL(target);
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    if (!upstream) {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end('{"forged":true}');
      return;
    }
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: upstream.host },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on("error", () => res.destroy());
    req.pipe(out);
  });
  server.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
