// Hostile nodes and slow clients against a whole stack on a bus with NATS's default 1 MB
// `max_payload`: large answers arrive intact, oversize ones are cut, and no peer can make a
// service hold memory without bound. Memory is asserted as RSS growth with a wide margin.
// Answers are the gateway's responsibility: a node's own 401/403 and an answer that is not
// the JSON or SSE due never reach the client as the node sent them.
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { pollUntil, pourResponse } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import {
  authHeaders,
  chainPolicy,
  nodeStatus,
  startStack,
  waitForStatus,
} from "../support/stack.ts";
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
/** Nodes that answer badly (family BAD), and one that answers well (family GOOD). */
const bad = new Map<string, HostileNode>();
let good: HostileNode;
/** In every prompt of the refusal tests: it must reach no log line. */
const PROMPT_MARKER = "prompt-marker-7d41c0";
const PROVIDER_MESSAGE = "Incorrect API key provided: sk-prov************9f2e";
/** Well-formed but unusual SSE (comments, CRLF, event and id fields): relayed byte for byte. */
const EXACT_STREAM =
  ": stream opened\r\n\r\n" +
  'event: message\r\ndata: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\r\n\r\n' +
  ": between tokens\n\n" +
  'id: 2\ndata: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' +
  "data: [DONE]\n\n";
const GOOD_ANSWER = '{"id":"c1","object":"chat.completion","choices":[]}';
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
    pourResponse(
      res,
      Buffer.from(`data: {"choices":[{"delta":{"content":"${"z".repeat(4000)}"}}]}\n\n`),
      2048 * MiB,
    );
  });
  metricsBomb = await startHostileNode(() => undefined, {
    metrics: (res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      pourResponse(
        res,
        Buffer.from(`vllm:num_requests_running{pad="${"p".repeat(4000)}"} 0\n`),
        150 * MiB,
      );
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
  const answering =
    (status: number, type: string, body: string) => (_req: IncomingMessage, res: ServerResponse) =>
      res.writeHead(status, { "content-type": type }).end(body);
  // Each bad answer from two nodes: one alone for its model, one before the good node. (A
  // node that failed cools down, so one node could not show both.)
  const badAnswers: Array<[string, (req: IncomingMessage, res: ServerResponse) => void]> = [
    [
      "refuses-401",
      answering(
        401,
        "application/json",
        JSON.stringify({
          error: {
            message: PROVIDER_MESSAGE,
            type: "invalid_request_error",
            param: null,
            code: "invalid_api_key",
          },
        }),
      ),
    ],
    ["refuses-403", answering(403, "text/plain", "Forbidden: this key may not use the model")],
    ["html", answering(200, "text/html", "<html><h1>Hi</h1></html>")],
    ["not-json", answering(200, "application/json", "{not json}")],
    ["json-for-stream", answering(200, "application/json", GOOD_ANSWER)],
    ["html-stream", answering(200, "text/event-stream", "<html>\n\n<h1>Hi</h1>\n\n</html>")],
  ];
  for (const [id, handler] of badAnswers) {
    bad.set(id, await startHostileNode(handler));
    bad.set(`${id}-or-good`, await startHostileNode(handler));
  }
  good = await startHostileNode((req, res) => {
    const stream = req.headers.accept === "text/event-stream";
    res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json" });
    res.end(stream ? EXACT_STREAM : GOOD_ANSWER);
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
      models: [
        ...["llama-3.1-8b-instruct", "big", "firehose", "bomb", "denied", "stall"].map((id) => ({
          id,
        })),
        // A model per bad node (`<answer>`, `<answer>-or-good`), each node serving its own;
        // the good node serves every `-or-good` model, after the bad one (BAD comes first).
        ...[...bad.keys()].map((id) => ({ id, default_policy: "bad-first" })),
        { id: "exact-stream", default_policy: "bad-first" },
      ],
      policies: [chainPolicy("bad-first", ["BAD", "GOOD"])],
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
      ...[...bad].map(([id, node], i) => ({
        ...hostileNodeSpec(id, node, id, 10 + i),
        accelerator_family: "BAD",
      })),
      {
        ...hostileNodeSpec("good", good, "exact-stream", 30),
        accelerator_family: "GOOD",
        models: ["exact-stream", ...[...bad.keys()].filter((id) => id.endsWith("-or-good"))],
      },
    ],
  });
  await waitForStatus(stack, "Active", [
    "big-node",
    "firehose-node",
    "stall-node",
    "good",
    ...bad.keys(),
  ]);
});

afterAll(async () => {
  await stack?.stop();
  await Promise.all(
    [big, firehose, metricsBomb, denied, stall, good, ...bad.values()].map((n) => n?.close()),
  );
});

const chat = (model: string, stream = false, headers: Record<string, string> = {}) =>
  fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { ...authHeaders(), ...headers },
    body: JSON.stringify({
      model,
      stream,
      messages: [{ role: "user", content: `x ${PROMPT_MARKER}` }],
    }),
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
      res.write('{"pad":"'); // it opens as JSON does, so it is relayed until the cap
      pourResponse(res, Buffer.alloc(MiB, "b"), 100 * MiB);
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

/**
 * What the client received for a request the gateway refused to answer with a node's answer:
 * the whole answer, parsed, and the headers that matter. Every byte of it is checked.
 */
async function refusal(res: Response) {
  const text = await res.text();
  return {
    status: res.status,
    type: res.headers.get("content-type"),
    requestId: res.headers.get("x-request-id"),
    body: JSON.parse(text) as unknown,
    text,
  };
}

const envelope = (code: string, message: string) => ({
  error: { message, type: "api_error", param: null, code },
});

describe("a node that refuses the gateway's credential (its own 401 or 403)", () => {
  it("is a 502 upstream_auth_failed for the client, its message only in the dispatcher's log", async () => {
    const node = bad.get("refuses-401")!;
    const before = node.received();
    const got = await refusal(await chat("refuses-401", false, { "x-request-id": "req-auth-401" }));
    expect(got).toMatchObject({
      status: 502,
      type: "application/json; charset=utf-8",
      requestId: "req-auth-401",
    });
    expect(got.body).toEqual(
      envelope(
        "upstream_auth_failed",
        "1 attempt(s) failed; last: refuses-401 refused the gateway's credential (401)",
      ),
    );
    expect(got.text).not.toContain("Incorrect API key");
    expect(node.received()).toBe(before + 1);
    const dispatcherLog = stack.services.get("dispatcher")!.output();
    const line = dispatcherLog
      .split("\n")
      .find(
        (l) => l.includes("node refused the gateway's credential") && l.includes("req-auth-401"),
      );
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({
      level: "error",
      node: "refuses-401",
      status: 401,
      node_message: PROVIDER_MESSAGE,
    });
    expect(stack.logs()).not.toContain(PROMPT_MARKER);
  });

  it("is a 502 upstream_auth_failed for a 403 too, and a stream gets the same envelope", async () => {
    const got = await refusal(await chat("refuses-403", true));
    expect(got.status).toBe(502);
    expect(got.type).toMatch(/^application\/json/);
    expect(got.requestId).toMatch(/\S/);
    expect(got.body).toEqual(
      envelope(
        "upstream_auth_failed",
        "1 attempt(s) failed; last: refuses-403 refused the gateway's credential (403)",
      ),
    );
    expect(stack.services.get("dispatcher")!.output()).toContain(
      '"node_message":"Forbidden: this key may not use the model"',
    );
  });

  it("fails over to a node that answers, and rests: the next request goes there at once", async () => {
    const node = bad.get("refuses-401-or-good")!;
    const before = { bad: node.received(), good: good.received() };
    const res = await chat("refuses-401-or-good");
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(GOOD_ANSWER);
    expect(res.headers.get("x-zml-routing")).toMatch(/node="good".*attempts=2/);
    const next = await chat("refuses-401-or-good");
    expect(await next.text()).toBe(GOOD_ANSWER);
    expect(next.headers.get("x-zml-routing")).toMatch(/node="good".*attempts=1/);
    expect(node.received()).toBe(before.bad + 1);
    expect(good.received()).toBe(before.good + 2);
  });
});

describe("a node whose answer is not the JSON or SSE due", () => {
  const cases = [
    ["html", false, "answered text/html where application/json is due"],
    ["not-json", false, "answered a body that is not JSON"],
    ["json-for-stream", true, "answered application/json where SSE is due"],
    ["html-stream", true, "answered text/event-stream that is not SSE"],
  ] as const;

  it.each(cases)(
    "%s: a 502 bad_upstream_response, none of the node's bytes",
    async (id, stream, why) => {
      const node = bad.get(id)!;
      const before = node.received();
      const got = await refusal(await chat(id, stream, { "x-request-id": `req-${id}` }));
      // A stream's error before its head is written by intake's relay, without a charset.
      expect(got).toMatchObject({ status: 502, requestId: `req-${id}` });
      expect(got.type).toMatch(/^application\/json(; charset=utf-8)?$/);
      expect(got.body).toEqual(
        envelope("bad_upstream_response", `1 attempt(s) failed; last: ${id} ${why}`),
      );
      expect(got.text).not.toContain("<h1>");
      expect(node.received()).toBe(before + 1);
    },
  );

  it.each(cases)("%s: fails over to a node that answers", async (id, stream) => {
    const node = bad.get(`${id}-or-good`)!;
    const before = { bad: node.received(), good: good.received() };
    const res = await chat(`${id}-or-good`, stream);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(stream ? EXACT_STREAM : GOOD_ANSWER);
    expect(res.headers.get("x-zml-routing")).toMatch(/node="good".*attempts=2/);
    expect(node.received()).toBe(before.bad + 1);
    expect(good.received()).toBe(before.good + 1);
  });
});

describe("a well-formed stream", () => {
  it("reaches the client byte for byte: comments, CRLF, event and id fields", async () => {
    const res = await chat("exact-stream", true);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(await res.text()).toBe(EXACT_STREAM);
  });
});
