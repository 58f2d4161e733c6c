// Hostile nodes and slow clients against a whole stack on a bus with NATS's default 1 MB
// `max_payload`: large answers arrive intact, oversize ones are cut, and no peer can make a
// service hold memory without bound. Memory is asserted as RSS growth with a wide margin.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, pour, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { authHeaders, nodeStatus, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const MiB = 1024 * 1024;
let stack: Stack;
let big: HostileNode;
let firehose: HostileNode;
let metricsBomb: HostileNode;
/** On an address the operator denies (127.0.0.2), registered straight into KV. */
let denied: HostileNode;
/** Sends one SSE event, then nothing: the request's deadline (ZML_REQUEST_TIMEOUT_MS) ends it. */
let stall: HostileNode;
let bigAnswer: Buffer;
/** The aggregator's RSS before it ever probed the metrics bomb. */
let aggregatorBefore: number;

function rssMiB(service: string): number {
  const pid = stack.services.get(service)!.pid;
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

beforeAll(async () => {
  bigAnswer = Buffer.alloc(5 * MiB, "a");
  bigAnswer.write('{"id":"big","pad":"', 0);
  bigAnswer.write('"}', bigAnswer.length - 2);
  big = await startHostileNode((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(bigAnswer);
  });
  firehose = await startHostileNode((_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    pour(
      res,
      Buffer.from(`data: {"choices":[{"delta":{"content":"${"z".repeat(4000)}"}}]}\n\n`),
      2048 * MiB,
    );
  });
  metricsBomb = await startHostileNode(() => undefined, {
    metrics: (res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      pour(res, Buffer.from(`vllm:num_requests_running{pad="${"p".repeat(4000)}"} 0\n`), 150 * MiB);
    },
  });
  denied = await startHostileNode(
    (_req, res) => res.writeHead(200, { "content-type": "application/json" }).end("{}"),
    { host: "127.0.0.2" },
  );
  stall = await startHostileNode((_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write('data: {"choices":[{"index":0,"delta":{"content":"one"}}]}\n\n');
  });
  stack = await startStack({
    nodes: [{ nodeId: "h100-a", family: "H100" }],
    natsMaxPayload: "1MB",
    env: {
      DISPATCH_MAX_ANSWER_BYTES: String(32 * MiB),
      ZML_CLIENT_BUFFER_MAX_BYTES: String(4 * MiB),
      POLL_INTERVAL_MS: "300",
      ZML_NODE_DENY_CIDRS: "127.0.0.2/32",
      ZML_REQUEST_TIMEOUT_MS: "6000",
    },
    fleet: {
      models: ["llama-3.1-8b-instruct", "big", "firehose", "bomb", "denied", "stall"].map((id) => ({
        id,
      })),
    },
  });
  aggregatorBefore = rssMiB("health-aggregator");
  await stack.apply({
    ...stack.fleet,
    nodes: [
      ...stack.fleet.nodes,
      hostileNodeSpec("big-node", big, "big", 1),
      hostileNodeSpec("firehose-node", firehose, "firehose", 2),
      hostileNodeSpec("bomb-node", metricsBomb, "bomb", 3),
      hostileNodeSpec("denied-node", denied, "denied", 4),
      hostileNodeSpec("stall-node", stall, "stall", 5),
    ],
  });
  await waitForStatus(stack, "Active", ["big-node", "firehose-node", "stall-node"]);
});

afterAll(async () => {
  await stack?.stop();
  await Promise.all([big, firehose, metricsBomb, denied, stall].map((n) => n?.close()));
});

const chat = (model: string, stream = false) =>
  fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "x" }] }),
  });

describe("a node's large answer", () => {
  it("reaches the client intact through a 1 MB max_payload bus (5 MiB, not streamed)", async () => {
    const res = await chat("big");
    expect(res.status).toBe(200);
    expect(res.headers.get("x-zml-routing")).toContain('node="big-node"');
    const got = Buffer.from(await res.arrayBuffer());
    const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    expect(got.length).toBe(bigAnswer.length);
    expect(sha(got)).toBe(sha(bigAnswer));
  });

  it("is cut past the dispatcher's cap, without the dispatcher holding it (100 MiB)", async () => {
    big.answer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      pour(res, Buffer.alloc(MiB, "b"), 100 * MiB);
    });
    const before = rssMiB("dispatcher");
    const res = await chat("big");
    expect(res.status).toBe(200); // the first MiB went out before the cap was reached
    await expect(res.arrayBuffer()).rejects.toThrow();
    const growth = rssMiB("dispatcher") - before;
    expect(growth).toBeLessThan(80);
    expect(stack.logs()).not.toContain('"level":"fatal"');
  });
});

describe("a client that stops reading a stream", () => {
  it("is cut off at intake's buffer cap, and the node call is cancelled", async () => {
    const before = rssMiB("intake");
    const body = JSON.stringify({
      model: "firehose",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    const { port } = new URL(stack.intakeUrl);
    const socket = connect({ host: "127.0.0.1", port: Number(port) });
    socket.pause(); // never reads a byte of the answer
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: ${authHeaders().authorization}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await pollUntil(() => firehose.abandoned() === 1, {
      timeoutMs: 30_000,
      message: "the firehose node's call to be cancelled",
    });
    socket.destroy();
    expect(rssMiB("intake") - before).toBeLessThan(64);
  });
});

describe("a node whose /metrics is 150 MiB", () => {
  it("fails its probes at the aggregator's cap, and the aggregator's memory stays bounded", async () => {
    await pollUntil(async () => (await nodeStatus(stack, "bomb-node")) !== undefined, {
      timeoutMs: 15_000,
      message: "a state for bomb-node",
    });
    await pollUntil(async () => (await nodeStatus(stack, "bomb-node")) !== "Active", {
      timeoutMs: 15_000,
      message: "bomb-node not Active",
    });
    expect(rssMiB("health-aggregator") - aggregatorBefore).toBeLessThan(64);
    const res = await chat("bomb");
    expect(res.status).toBe(503);
    await res.arrayBuffer();
    expect(metricsBomb.received()).toBe(0);
  });
});

describe("a node at an address the operator denies", () => {
  it("is never probed nor sent a payload, though its spec is in the registry", async () => {
    await pollUntil(async () => (await nodeStatus(stack, "denied-node")) !== undefined, {
      timeoutMs: 15_000,
      message: "a state for denied-node",
    });
    expect(await nodeStatus(stack, "denied-node")).not.toBe("Active");
    const res = await chat("denied");
    const text = await res.text();
    expect(res.status, text).toBe(503);
    expect(denied.probes()).toBe(0);
    expect(denied.received()).toBe(0);
  });
});

describe("a stream that goes silent until the request's deadline", () => {
  it("ends with an upstream_timeout error event from the dispatcher, never [DONE]", async () => {
    const res = await chat("stall", true);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('"content":"one"');
    expect(text).toMatch(/event: error\ndata: .*"code":"upstream_timeout"/);
    expect(text).not.toContain("[DONE]");
    expect(stack.logs()).not.toContain("is not a function");
  });
});
