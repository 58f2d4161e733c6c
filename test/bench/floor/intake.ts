// The floor's HTTP side: a bare node:http server that publishes each request body on the
// bus and writes the answer's messages back as they come. No auth, validation, routing,
// tracing, metrics or logging: see docs/performance.md for what that leaves out.
import { createServer } from "node:http";
import type { ServerResponse } from "node:http";
import type { Msg } from "@nats-io/transport-node";
import { inboxPrefixOf } from "@zml/contracts";
import { connectFloor } from "./connect.ts";
import { FLOOR_HEADER, FLOOR_INTAKE, FLOOR_REQUEST_PREFIX } from "./protocol.ts";

const nc = await connectFloor(process.env, FLOOR_INTAKE, inboxPrefixOf(FLOOR_INTAKE));
// One subscription for every reply, as ZML's intake has: a request costs no SUB/UNSUB.
const replies = `${inboxPrefixOf(FLOOR_INTAKE)}.floor`;
const waiting = new Map<string, ServerResponse>();
nc.subscribe(`${replies}.*`, {
  callback: (_err, msg) => {
    const id = msg.subject.slice(replies.length + 1);
    const res = waiting.get(id);
    if (res !== undefined) write(id, res, msg);
  },
});

function write(id: string, res: ServerResponse, msg: Msg): void {
  const head = msg.headers;
  if (head === undefined) {
    if (msg.data.length > 0) res.write(msg.data);
    else {
      waiting.delete(id);
      res.end();
    }
    return;
  }
  const type = head.get(FLOOR_HEADER.type);
  const status = Number(head.get(FLOOR_HEADER.status));
  if (head.has(FLOOR_HEADER.whole)) {
    waiting.delete(id);
    res.writeHead(status, { "content-type": type, "content-length": msg.data.length });
    res.end(msg.data);
    return;
  }
  res.writeHead(status, { "content-type": type });
  if (msg.data.length > 0) res.write(msg.data);
}

let next = 0;
const server = createServer((req, res) => {
  // `/n/<node index>/v1/chat/completions`: the index names the node; nothing else is read.
  const node = req.url?.split("/")[2] ?? "0";
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const id = String(next++);
    waiting.set(id, res);
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    nc.publish(`${FLOOR_REQUEST_PREFIX}.${node}`, body, { reply: `${replies}.${id}` });
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ event: "ready", url: `http://127.0.0.1:${port}` })}\n`);
});
process.once("SIGTERM", () => {
  server.close();
  void nc.close().then(() => process.exit(0));
});
