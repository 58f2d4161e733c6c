// A streaming node shaped like a serving engine, for the bench's fleet rows: one timer, one
// engine step every `--step-ms`, and each step emits one token to every running stream, as
// vLLM's continuous batching does. A request joins the running batch at once and gets its
// first token at the next step; after `--tokens` steps its last token carries
// `finish_reason` and `[DONE]`. Its own process, so that it never competes with the load.
//
//   node test/bench/step-node.ts --model bench-fleet --step-ms 20 --tokens 100
//   stdout: {"event":"ready","url":"http://127.0.0.1:PORT"}
//
// Besides `POST /v1/chat/completions` it answers `GET /health` and vLLM's `GET /metrics`
// (running and waiting requests, generated tokens), which is what the health aggregator polls.
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    model: { type: "string" },
    "step-ms": { type: "string", default: "20" },
    tokens: { type: "string", default: "100" },
  },
});
const model = values.model;
const stepMs = Number(values["step-ms"]);
const tokens = Number(values.tokens);
if (!model || !Number.isInteger(tokens) || tokens < 1 || !(stepMs > 0)) {
  process.stderr.write(
    "usage: node test/bench/step-node.ts --model <id> [--step-ms 20] [--tokens 100]\n",
  );
  process.exit(2);
}

/** The events of every stream, rendered once: token `i`'s event is the same for all. */
const events = Array.from({ length: tokens }, (_, i) => {
  const last = i === tokens - 1;
  const chunk = {
    id: "chatcmpl-step",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model,
    choices: [{ index: 0, delta: { content: `t${i} ` }, finish_reason: last ? "stop" : null }],
  };
  return Buffer.from(`data: ${JSON.stringify(chunk)}\n\n${last ? "data: [DONE]\n\n" : ""}`);
});

interface Running {
  res: ServerResponse;
  /** Tokens sent so far. */
  sent: number;
}

const running = new Set<Running>();
let generated = 0;
let timer: NodeJS.Timeout | undefined;

/** One engine step: a token to every running stream, the finished ones ended. */
function step(): void {
  for (const r of running) {
    const event = events[r.sent++]!;
    generated++;
    if (r.sent === tokens) {
      running.delete(r);
      r.res.end(event);
    } else r.res.write(event);
  }
  if (running.size === 0) {
    clearInterval(timer);
    timer = undefined;
  }
}

function admit(res: ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.flushHeaders();
  const r: Running = { res, sent: 0 };
  running.add(r);
  res.once("close", () => running.delete(r));
  // The engine loop runs while it has work: a request arriving to an idle engine waits a
  // whole step for its first token, one arriving to a busy one the rest of the current step.
  timer ??= setInterval(step, stepMs);
}

function metrics(): string {
  const label = `{model_name="${model}"}`;
  return [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    `vllm:num_requests_running${label} ${running.size}`,
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    `vllm:num_requests_waiting${label} 0`,
    "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
    "# TYPE vllm:generation_tokens_total counter",
    `vllm:generation_tokens_total${label} ${generated}`,
    "",
  ].join("\n");
}

function answer(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function complete(req: IncomingMessage, res: ServerResponse): void {
  const parts: Buffer[] = [];
  req.on("data", (c: Buffer) => parts.push(c));
  req.on("end", () => {
    let stream: boolean;
    try {
      stream =
        (JSON.parse(Buffer.concat(parts).toString("utf8")) as { stream?: unknown }).stream === true;
    } catch {
      answer(res, 400, "application/json", '{"error":{"message":"body is not JSON"}}');
      return;
    }
    if (stream) {
      admit(res);
      return;
    }
    // Not what the rows measure; the readiness check's one request.
    const text = events.map((_, i) => `t${i} `).join("");
    answer(
      res,
      200,
      "application/json",
      JSON.stringify({
        id: "chatcmpl-step",
        object: "chat.completion",
        created: 1_700_000_000,
        model,
        choices: [
          { index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" },
        ],
        usage: { prompt_tokens: 1, completion_tokens: tokens, total_tokens: tokens + 1 },
      }),
    );
  });
}

const server = createServer({ noDelay: true, keepAliveTimeout: 60_000 }, (req, res) => {
  const path = req.url?.split("?")[0];
  if (req.method === "POST" && path === "/v1/chat/completions") complete(req, res);
  else if (req.method === "GET" && path === "/health") answer(res, 200, "text/plain", "");
  else if (req.method === "GET" && path === "/metrics") {
    answer(res, 200, "text/plain; version=0.0.4; charset=utf-8", metrics());
  } else answer(res, 404, "application/json", '{"error":{"message":"not found"}}');
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ event: "ready", url: `http://127.0.0.1:${port}` })}\n`);
});
const stop = () => {
  clearInterval(timer);
  for (const r of running) r.res.destroy();
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
