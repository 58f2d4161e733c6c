// The simulated vLLM node over HTTP/2 behind the whole gateway, as `npm run bench` uses it:
// the health aggregator probes it over HTTP/1.1 on the same port (so it becomes Active), the
// dispatcher calls it over h2c or h2 as its spec declares, and answers come back whole.
import { createTestCertificate } from "@zml/harness";
import type { TestCertificate } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

let stack: Stack;
let testCertificate: TestCertificate | undefined;

beforeAll(async () => {
  // A certificate for 127.0.0.1 that the services trust (NODE_EXTRA_CA_CERTS).
  testCertificate = createTestCertificate();
  const certificate = {
    keyPem: testCertificate.key.toString("utf8"),
    certPem: testCertificate.cert.toString("utf8"),
  };
  stack = await startStack({
    nodes: [
      { nodeId: "h2c", family: "H100", models: ["m-h2c"], protocol: "h2c", tokensPerSecond: 200 },
      {
        nodeId: "h2",
        family: "H100",
        models: ["m-h2"],
        protocol: "h2",
        certificate,
        tokensPerSecond: 200,
      },
      // Offers h2 by ALPN, but its spec declares no protocol: an HTTP/1.1 node to ZML.
      {
        nodeId: "tls-h1",
        family: "H100",
        models: ["m-tls-h1"],
        protocol: "h2",
        certificate,
        tokensPerSecond: 200,
      },
    ],
    env: { NODE_EXTRA_CA_CERTS: testCertificate.certPath },
    fleet: { models: [{ id: "m-h2c" }, { id: "m-h2" }, { id: "m-tls-h1" }] },
  });
  await stack.apply({
    ...stack.fleet,
    nodes: stack.fleet.nodes.map((n) =>
      n.id === "tls-h1" ? n : { ...n, protocol: n.id as "h2c" | "h2" },
    ),
  });
  await waitForStatus(stack, "Active", ["h2c", "h2", "tls-h1"]);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  testCertificate?.dispose();
});

const chat = (model: string, stream: boolean) =>
  fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "hi" }] }),
  });

describe.each(["h2c", "h2"])("a simulated node declared %s", (id) => {
  it("gets plain and streamed requests over HTTP/2 only and they come back whole", async () => {
    const sim = stack.sims.get(id)!;
    sim.resetStats();
    const plain = await chat(`m-${id}`, false);
    expect(plain.status).toBe(200);
    const body = (await plain.json()) as { usage: { completion_tokens: number } };
    expect(body.usage.completion_tokens).toBe(16);

    const streamed = await chat(`m-${id}`, true);
    expect(streamed.status).toBe(200);
    const text = await streamed.text();
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(text).not.toContain("event: error");

    expect(sim.stats().payloads_by_http_version).toEqual({ "2.0": 2 });
    expect(sim.stats().completed).toBe(2);
  });
});

it("an https node declared without a protocol is called over HTTP/1.1 even when it offers h2", async () => {
  const sim = stack.sims.get("tls-h1")!;
  sim.resetStats();
  const plain = await chat("m-tls-h1", false);
  expect(plain.status).toBe(200);
  await plain.text();
  const streamed = await chat("m-tls-h1", true);
  expect((await streamed.text()).endsWith("data: [DONE]\n\n")).toBe(true);
  expect(sim.stats().payloads_by_http_version).toEqual({ "1.1": 2 });
});
