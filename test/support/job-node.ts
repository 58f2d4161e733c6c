// A node of our own for batch tests that counts, per job, how often the node really ran it:
// every chat completion it receives is one execution of the job named by its first message
// (the tests send the job id there). It answers after a delay the test sets, reports what it
// is running in vLLM's metrics (so the health aggregator sees a real depth), and remembers
// executions whose caller went away before the answer (a dispatcher killed mid-job).
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";

export interface Execution {
  jobId: string;
  startedAt: number;
  /** When the answer was written in full; undefined while running or when abandoned. */
  finishedAt?: number;
  /** When the caller closed the connection before the answer was complete. */
  abandonedAt?: number;
}

export interface JobNode {
  url: string;
  /** Every execution so far, in arrival order. */
  executions(): readonly Execution[];
  /** Executions per job id. */
  countOf(jobId: string): number;
  running(): number;
  /** How long each execution takes from now on. */
  setDelay(ms: number): void;
  spec(id: string, model: string, maxConcurrency: number): NodeSpec;
  close(): Promise<void>;
}

function jobIdOf(body: string): string {
  try {
    const parsed = JSON.parse(body) as { messages?: Array<{ content?: unknown }> };
    const content = parsed.messages?.[0]?.content;
    return typeof content === "string" ? content : "";
  } catch {
    return "";
  }
}

function completion(model: string, text: string): string {
  return JSON.stringify({
    id: "chatcmpl-job-node",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  });
}

export async function startJobNode(options: { delayMs: number }): Promise<JobNode> {
  let delayMs = options.delayMs;
  const executions: Execution[] = [];
  const counts = new Map<string, number>();
  let running = 0;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  const infer = (req: IncomingMessage, res: ServerResponse, body: string) => {
    const jobId = jobIdOf(body);
    const execution: Execution = { jobId, startedAt: Date.now() };
    executions.push(execution);
    counts.set(jobId, (counts.get(jobId) ?? 0) + 1);
    running++;
    res.once("close", () => {
      running--;
      if (!res.writableEnded) execution.abandonedAt = Date.now();
    });
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (res.destroyed) return;
      const model = (JSON.parse(body) as { model?: string }).model ?? "m";
      res.writeHead(200, { "content-type": "application/json" });
      res.end(completion(model, `ran ${jobId}`), () => (execution.finishedAt = Date.now()));
    }, delayMs);
    timers.add(timer);
  };

  const server = createServer((req, res) => {
    if (req.url === "/health") return void res.writeHead(200).end();
    // The aggregator asks what the engine serves; this node does not say (no job either).
    if (req.url === "/v1/models" && req.method === "GET") {
      return void res
        .writeHead(404, { "content-type": "application/json" })
        .end('{"detail":"Not Found"}');
    }
    if (req.url === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
      return void res.end(
        [
          "# TYPE vllm:num_requests_running gauge",
          `vllm:num_requests_running{model_name="m"} ${running}`,
          "# TYPE vllm:num_requests_waiting gauge",
          'vllm:num_requests_waiting{model_name="m"} 0',
          "",
        ].join("\n"),
      );
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.once("end", () => infer(req, res, Buffer.concat(chunks).toString("utf8")));
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    executions: () => executions,
    countOf: (jobId) => counts.get(jobId) ?? 0,
    running: () => running,
    setDelay: (ms) => (delayMs = ms),
    spec: (id, model, maxConcurrency) =>
      nodeSpec(id, { endpoint: url, models: [model], max_concurrency: maxConcurrency }),
    close: () =>
      new Promise((resolve) => {
        for (const t of timers) clearTimeout(t);
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
