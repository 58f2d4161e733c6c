// A node of our own for hostile-node tests: a real HTTP server that passes the health
// aggregator's checks (vLLM `/health` and `/metrics`) and answers inference however the test
// says. Not the project's simulator, so nothing it does is tuned to ZML.
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer as createH2cServer, createSecureServer } from "node:http2";
import type { AddressInfo, Server, Socket } from "node:net";
import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import { createSniffingServer } from "@zml/node-sim";

export type InferenceHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface HostileNode {
  url: string;
  /** Inference requests received (anything but /health, /metrics and `GET /v1/models`). */
  received(): number;
  /** Health checks received. */
  probes(): number;
  /** HTTP version of each inference request received (`1.1`, `2.0`), in order. */
  httpVersions(): string[];
  /** Inference requests whose connection closed before the answer was complete. */
  abandoned(): number;
  /** Replaces how inference requests are answered. */
  answer(handler: InferenceHandler): void;
  close(): Promise<void>;
}

const IDLE_VLLM_METRICS = [
  "# TYPE vllm:num_requests_running gauge",
  'vllm:num_requests_running{model_name="m"} 0',
  "# TYPE vllm:num_requests_waiting gauge",
  'vllm:num_requests_waiting{model_name="m"} 0',
  "",
].join("\n");

export interface HostileNodeOptions {
  metrics?: (res: ServerResponse) => void;
  host?: string;
  /**
   * `h2c`: HTTP/2 without TLS by prior knowledge, and HTTP/1.1 on the same port (told apart
   * by the connection preface, as h2c servers do: health probes speak HTTP/1.1). `h2`: TLS
   * with `tls`'s key and certificate, HTTP/2 or HTTP/1.1 by ALPN. Default HTTP/1.1 only.
   */
  protocol?: "http1" | "h2" | "h2c";
  tls?: { key: string; cert: string };
}

export async function startHostileNode(
  handler: InferenceHandler,
  options: HostileNodeOptions = {},
): Promise<HostileNode> {
  let answer = handler;
  let received = 0;
  let abandoned = 0;
  const versions: string[] = [];
  const http1 = createServer((req, res) => handle(req, res));
  const protocol = options.protocol ?? "http1";
  const sockets = new Set<Socket>();
  let server: Server;
  if (protocol === "h2c") {
    // The compatibility API hands out objects shaped like node:http's.
    const h2 = createH2cServer((req, res) => handle(req as never, res as never));
    // Told apart by the connection preface: generic h2c server behaviour, not ZML's.
    server = createSniffingServer(http1, h2);
  } else if (protocol === "h2") {
    if (!options.tls) throw new Error("an h2 node needs tls: { key, cert }");
    server = createSecureServer({ ...options.tls, allowHTTP1: true }, (req, res) =>
      handle(req as never, res as never),
    );
  } else {
    server = http1;
  }
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  let probes = 0;
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (req.url === "/health") {
      probes++;
      return void res.writeHead(200).end();
    }
    if (req.url === "/metrics") {
      if (options.metrics) return options.metrics(res);
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
      return void res.end(IDLE_VLLM_METRICS);
    }
    // The aggregator also asks what the engine serves; this one does not say (so nothing is
    // withheld from it), and the question is no inference request.
    if (req.url === "/v1/models" && req.method === "GET") {
      return void res
        .writeHead(404, { "content-type": "application/json" })
        .end('{"detail":"Not Found"}');
    }
    received++;
    versions.push(req.httpVersion);
    res.once("close", () => {
      // HTTP/2's compatibility response says "finished" once its stream closes, even
      // when it was reset: an answer never ended is abandoned too.
      if (!res.writableFinished || !res.writableEnded) abandoned++;
    });
    // Read the request fully before answering, as a real server does.
    req.resume();
    req.once("end", () => answer(req, res));
  };
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `${protocol === "h2" ? "https" : "http"}://${host}:${port}`,
    probes: () => probes,
    httpVersions: () => [...versions],
    received: () => received,
    abandoned: () => abandoned,
    answer: (h) => (answer = h),
    close: () =>
      new Promise((resolve) => {
        http1.closeAllConnections();
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The spec an operator would register for a hostile node: a tier-1 vLLM L4 serving `model`. */
export function hostileNodeSpec(
  id: string,
  node: Pick<HostileNode, "url">,
  model: string,
  index: number,
  maxConcurrency = 4,
): NodeSpec {
  return nodeSpec(id, {
    endpoint: node.url,
    accelerator_family: "L4",
    models: [model],
    max_concurrency: maxConcurrency,
    registered_at: index,
  });
}
