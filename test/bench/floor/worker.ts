// The floor's node side: a queue subscriber that calls the node with undici and sends the
// answer back on the request's reply inbox (see protocol.ts). Nothing else.
import { headers } from "@nats-io/transport-node";
import type { Msg } from "@nats-io/transport-node";
import { Pool } from "undici";
import { connectFloor } from "./connect.ts";
import { FLOOR_HEADER, FLOOR_REQUEST_PREFIX, FLOOR_WORKER } from "./protocol.ts";

/** The nodes' URLs, by the index the request subject names. */
const nodes = JSON.parse(process.env.FLOOR_NODES ?? "[]") as string[];
// As many connections as requests in flight: a node call never waits for a socket.
const pools = nodes.map((url) => new Pool(url, { connections: 4096, keepAliveTimeout: 60_000 }));
const nc = await connectFloor(process.env, FLOOR_WORKER);
const EMPTY = new Uint8Array(0);

async function serve(msg: Msg): Promise<void> {
  const reply = msg.reply!;
  const pool = pools[Number(msg.subject.slice(FLOOR_REQUEST_PREFIX.length + 1))];
  const head = headers();
  try {
    if (pool === undefined) throw new Error(`no node ${msg.subject}`);
    const res = await pool.request({
      path: "/v1/chat/completions",
      method: "POST",
      headers: { "content-type": "application/json" },
      body: msg.data,
    });
    const type = String(res.headers["content-type"] ?? "application/json");
    head.set(FLOOR_HEADER.status, String(res.statusCode));
    head.set(FLOOR_HEADER.type, type);
    if (!type.startsWith("text/event-stream")) {
      head.set(FLOOR_HEADER.whole, "1");
      nc.publish(reply, new Uint8Array(await res.body.arrayBuffer()), { headers: head });
      return;
    }
    let first = true;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      nc.publish(reply, chunk, first ? { headers: head } : undefined);
      first = false;
    }
    if (first) nc.publish(reply, EMPTY, { headers: head });
    nc.publish(reply, EMPTY);
  } catch (error) {
    head.set(FLOOR_HEADER.status, "502");
    head.set(FLOOR_HEADER.type, "text/plain");
    head.set(FLOOR_HEADER.whole, "1");
    nc.publish(reply, new TextEncoder().encode(String(error)), { headers: head });
  }
}

nc.subscribe(`${FLOOR_REQUEST_PREFIX}.*`, {
  queue: "floor",
  callback: (_err, msg) => void serve(msg),
});
await nc.flush();
process.stdout.write(`${JSON.stringify({ event: "ready" })}\n`);
process.once("SIGTERM", () => {
  void nc.close().then(() => process.exit(0));
});
