// A node of our own for hostile-node tests: a real HTTP server that passes the health
// aggregator's checks (vLLM `/health` and `/metrics`) and answers inference however the test
// says. Not the project's simulator, so nothing it does is tuned to ZML.
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { NodeSpec } from "@zml/contracts";

export type InferenceHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface HostileNode {
  url: string;
  /** Inference requests received (anything but /health and /metrics). */
  received(): number;
  /** Health checks received. */
  probes(): number;
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

export async function startHostileNode(
  handler: InferenceHandler,
  options: { metrics?: (res: ServerResponse) => void; host?: string } = {},
): Promise<HostileNode> {
  let answer = handler;
  let received = 0;
  let abandoned = 0;
  const server = createServer((req, res) => {
    if (req.url === "/health") return void res.writeHead(200).end();
    if (req.url === "/metrics") {
      if (options.metrics) return options.metrics(res);
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
      return void res.end(IDLE_VLLM_METRICS);
    }
    received++;
    res.once("close", () => {
      if (!res.writableFinished) abandoned++;
    });
    // Read the request fully before answering, as a real server does.
    req.resume();
    req.once("end", () => answer(req, res));
  });
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  let probes = 0;
  server.on("request", (req: IncomingMessage) => {
    if (req.url === "/health") probes++;
  });
  return {
    url: `http://${host}:${port}`,
    probes: () => probes,
    received: () => received,
    abandoned: () => abandoned,
    answer: (h) => (answer = h),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Writes `block` to `res` until `totalBytes` are out or the connection closes, honouring drain. */
export function pour(res: ServerResponse, block: Buffer, totalBytes: number): void {
  let sent = 0;
  const more = () => {
    while (sent < totalBytes && !res.destroyed) {
      sent += block.length;
      if (!res.write(block)) return void res.once("drain", more);
    }
    if (!res.destroyed) res.end();
  };
  res.once("close", () => (sent = totalBytes));
  more();
}

/** The spec an operator would register for a hostile node: a tier-1 vLLM L4 serving `model`. */
export function hostileNodeSpec(
  id: string,
  node: Pick<HostileNode, "url">,
  model: string,
  index: number,
  maxConcurrency = 4,
): NodeSpec {
  return {
    id,
    endpoint: node.url,
    framework: "vllm",
    accelerator_family: "L4",
    tier: 1,
    models: [model],
    apis: ["chat", "completions"],
    max_concurrency: maxConcurrency,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: index,
  };
}
