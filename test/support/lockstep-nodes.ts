import { createServer } from "node:http";
import type { Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";

/**
 * Streaming nodes (vLLM's wire format and probes) driven by one engine step shared by all
 * of them: each step writes one token to every running stream of every node in the same
 * tick, so their events reach the gateway together, as a fleet's engines' tokens do. A node
 * can be made to die at a step, right after that step's tokens went out: every connection
 * closed and nothing listening any more, as the gateway sees a process that crashed (its
 * kernel closes its sockets).
 */
export interface LockstepNodes {
  /** Each node's URL, by id. */
  urls: ReadonlyMap<string, string>;
  /** Tokens a node has sent so far, over all its streams. */
  sent(id: string): number;
  /** Kills node `id` at the next step, after that step's writes to every stream. */
  killAtNextStep(id: string): void;
  /** Whether node `id` has died. */
  dead(id: string): boolean;
  close(): Promise<void>;
}

interface NodeState {
  server: Server;
  sockets: Set<Socket>;
  running: Set<{ res: ServerResponse; sent: number }>;
  sent: number;
  dead: boolean;
}

export async function startLockstepNodes(
  ids: readonly string[],
  options: { stepMs: number; tokens: number },
): Promise<LockstepNodes> {
  const { stepMs, tokens } = options;
  const event = (i: number) => {
    const last = i === tokens - 1;
    const chunk = {
      id: "chatcmpl-lockstep",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "lockstep",
      choices: [{ index: 0, delta: { content: `t${i} ` }, finish_reason: last ? "stop" : null }],
    };
    return `data: ${JSON.stringify(chunk)}\n\n${last ? "data: [DONE]\n\n" : ""}`;
  };
  const nodes = new Map<string, NodeState>();
  const killing = new Set<string>();
  const kill = (node: NodeState) => {
    node.dead = true;
    node.server.close();
    for (const socket of node.sockets) socket.destroy();
  };
  const timer = setInterval(() => {
    for (const node of nodes.values()) {
      for (const r of node.running) {
        const text = event(r.sent++);
        node.sent++;
        if (r.sent === tokens) {
          node.running.delete(r);
          r.res.end(text);
        } else r.res.write(text);
      }
    }
    // After this step's writes have left (each response flushes its socket at the end of
    // the tick), so the close follows the last tokens on the wire.
    const doomed = [...killing];
    killing.clear();
    if (doomed.length > 0) process.nextTick(() => doomed.forEach((id) => kill(nodes.get(id)!)));
  }, stepMs);

  const urls = new Map<string, string>();
  for (const id of ids) {
    const node: NodeState = {
      server: createServer({ noDelay: true }),
      sockets: new Set(),
      running: new Set(),
      sent: 0,
      dead: false,
    };
    node.server.on("connection", (socket: Socket) => {
      node.sockets.add(socket);
      socket.once("close", () => node.sockets.delete(socket));
    });
    node.server.on("request", (req, res: ServerResponse) => {
      const path = req.url?.split("?")[0];
      if (req.method === "GET" && path === "/health") {
        res.writeHead(200, { "content-length": 0 }).end();
        return;
      }
      if (req.method === "GET" && path === "/metrics") {
        const text = [
          "# TYPE vllm:num_requests_running gauge",
          `vllm:num_requests_running ${node.running.size}`,
          "# TYPE vllm:num_requests_waiting gauge",
          "vllm:num_requests_waiting 0",
          "",
        ].join("\n");
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(text);
        return;
      }
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        res.flushHeaders();
        const r = { res, sent: 0 };
        node.running.add(r);
        res.once("close", () => node.running.delete(r));
      });
    });
    await new Promise<void>((resolve) => node.server.listen(0, "127.0.0.1", resolve));
    const address = node.server.address();
    if (address === null || typeof address === "string") throw new Error("no port");
    urls.set(id, `http://127.0.0.1:${address.port}`);
    nodes.set(id, node);
  }
  return {
    urls,
    sent: (id) => nodes.get(id)?.sent ?? 0,
    killAtNextStep: (id) => void killing.add(id),
    dead: (id) => nodes.get(id)?.dead ?? false,
    async close() {
      clearInterval(timer);
      await Promise.all(
        [...nodes.values()].map(
          (node) =>
            new Promise<void>((resolve) => {
              node.dead = true;
              for (const socket of node.sockets) socket.destroy();
              if (node.server.listening) node.server.close(() => resolve());
              else resolve();
            }),
        ),
      );
    },
  };
}
