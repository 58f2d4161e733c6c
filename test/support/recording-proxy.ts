import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";

export interface RecordedAnswer {
  /** `METHOD /path` of the request. */
  request: string;
  status: number;
  body: Buffer;
}

export interface RecordingProxy {
  url: string;
  /** `METHOD /path` of every request that reached the proxy, in order. */
  seen: string[];
  /** Every answer the target gave, complete once its body ended: the exact bytes sent on. */
  answers: RecordedAnswer[];
  close(): Promise<void>;
}

/**
 * A plain HTTP reverse proxy on 127.0.0.1 that records every request line it forwards to
 * `target` and streams the answer back unchanged. Put in front of a node, it shows what
 * reached the node; with no target it answers 200 to everything (an attacker's server).
 */
export async function startRecordingProxy(target?: string): Promise<RecordingProxy> {
  const seen: string[] = [];
  const answers: RecordedAnswer[] = [];
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
        const chunks: Buffer[] = [];
        answer.on("data", (chunk: Buffer) => chunks.push(chunk));
        answer.on("end", () =>
          answers.push({
            request: `${req.method} ${req.url}`,
            status: answer.statusCode ?? 502,
            body: Buffer.concat(chunks),
          }),
        );
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
    answers,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
