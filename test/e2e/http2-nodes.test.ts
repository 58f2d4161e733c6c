// HTTP/2 to nodes whose spec declares it: h2c (prior knowledge, no TLS) and h2
// (ALPN over TLS), HTTP/1.1 for the rest. Observed at nodes of our own that record the HTTP
// version of every request and see streams end, break off or time out.
import type { ServerResponse } from "node:http";
import { chainPolicy } from "@zml/contracts/testing";
import { createTestCertificate, pollUntil } from "@zml/harness";
import type { TestCertificate } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const TARGET_MS = 1_500;
const token = (t: string) =>
  `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${t}"},"finish_reason":null}]}\n\n`;
const FINISH =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n';
const TOKENS = ["a", "b", "c", "d", "e"];

type Mode = "stream" | "stall" | "silent";
const modes = new Map<string, Mode>();
const nodes = new Map<string, HostileNode>();
let stack: Stack;
let certificate: TestCertificate | undefined;

/** Streams the tokens 30 ms apart; or one token and then nothing; or nothing at all. */
const answer = (id: string) => (_req: unknown, res: ServerResponse) => {
  const mode = modes.get(id) ?? "stream";
  if (mode === "silent") return;
  res.writeHead(200, { "content-type": "text/event-stream" });
  if (mode === "stall") return void res.write(token("a"));
  let k = 0;
  const next = () => {
    if (res.destroyed) return;
    if (k === TOKENS.length) return void res.end(FINISH);
    res.write(token(TOKENS[k++]!));
    setTimeout(next, 30);
  };
  next();
};

beforeAll(async () => {
  // A certificate for 127.0.0.1 that the services trust (NODE_EXTRA_CA_CERTS).
  certificate = createTestCertificate();
  const tls = { key: certificate.key.toString("utf8"), cert: certificate.cert.toString("utf8") };
  nodes.set("h2c", await startHostileNode(answer("h2c"), { protocol: "h2c" }));
  nodes.set("h2", await startHostileNode(answer("h2"), { protocol: "h2", tls }));
  nodes.set("h1", await startHostileNode(answer("h1")));
  const policy = chainPolicy("h2-test", ["L4"], { latency_target_ms: TARGET_MS });
  stack = await startStack({
    nodes: [],
    env: { NODE_EXTRA_CA_CERTS: certificate.certPath },
    fleet: {
      models: [...nodes.keys()].map((id) => ({ id: `m-${id}`, default_policy: "h2-test" })),
      policies: [policy],
    },
  });
  await stack.apply({
    ...stack.fleet,
    nodes: [...nodes].map(([id, node], i) => ({
      ...hostileNodeSpec(id, node, `m-${id}`, i),
      ...(id === "h1" ? {} : { protocol: id as "h2" | "h2c" }),
    })),
  });
  await waitForStatus(stack, "Active", [...nodes.keys()]);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await Promise.all([...nodes.values()].map((n) => n.close()));
  certificate?.dispose();
});

const chat = (id: string, signal?: AbortSignal) =>
  fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({
      model: `m-${id}`,
      stream: true,
      messages: [{ role: "user", content: "x" }],
    }),
    ...(signal ? { signal } : {}),
  });

describe.each(["h2c", "h2"])("a node that speaks %s", (id) => {
  it("gets the request over HTTP/2 and its stream is relayed whole", async () => {
    modes.set(id, "stream");
    const res = await chat(id);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(TOKENS.map(token).join("") + FINISH);
    expect(nodes.get(id)!.httpVersions().at(-1)).toBe("2.0");
  });

  it("a client that goes away cancels the node's stream", async () => {
    modes.set(id, "stall");
    const node = nodes.get(id)!;
    const before = node.abandoned();
    const abort = new AbortController();
    const res = await chat(id, abort.signal);
    const reader = res.body!.getReader();
    const first: Uint8Array | undefined = (await reader.read()).value;
    expect(Buffer.from(first ?? []).toString()).toContain('"content":"a"');
    abort.abort();
    await pollUntil(() => node.abandoned() > before, {
      timeoutMs: 10_000,
      message: "the node's stream to be cancelled",
    });
  });

  it("a silent node times out at the first-byte limit", async () => {
    modes.set(id, "silent");
    const node = nodes.get(id)!;
    const before = node.abandoned();
    const started = Date.now();
    const res = await chat(id);
    await res.text();
    const ms = Date.now() - started;
    expect(res.status).toBeGreaterThanOrEqual(500);
    await pollUntil(() => node.abandoned() > before, { timeoutMs: 5_000, message: "abandoned" });
    expect(ms).toBeGreaterThanOrEqual(TARGET_MS - 50);
    expect(ms).toBeLessThan(TARGET_MS + 5_000);
  });
});

it("a node that declares nothing is called over HTTP/1.1", async () => {
  modes.set("h1", "stream");
  const res = await chat("h1");
  expect(res.status).toBe(200);
  await res.text();
  expect(nodes.get("h1")!.httpVersions().at(-1)).toBe("1.1");
});
