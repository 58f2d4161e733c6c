import { once } from "node:events";
import { connect as h2connect } from "node:http2";
import type { IncomingHttpHeaders } from "node:http2";
import { parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { createTestCertificate, pollUntil } from "@zml/harness";
import type { TestCertificate } from "@zml/harness";
import OpenAI from "openai";
import { Agent, fetch as undiciFetch, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, MODEL, authHeaders, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/**
 * The gateway over TLS with ALPN (HTTP/2 and HTTP/1.1 on one port), and client disconnects
 * propagated to the node: the dispatcher aborts the node call and frees its slot.
 */

let stack: Stack;
let tls: TestCertificate;
let cert: Buffer;
let url: string;
let h1: Agent;
let h2: Agent;

beforeAll(async () => {
  tls = createTestCertificate();
  cert = tls.cert;
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      // Slow enough that a request is still running when its client goes away.
      {
        nodeId: "slow-a",
        family: "A100",
        models: ["slow-model"],
        tokensPerSecond: 5,
        completionTokens: 200,
      },
    ],
    fleet: { models: [{ id: MODEL }, { id: "slow-model" }] },
    env: { ZML_TLS_CERT_FILE: tls.certPath, ZML_TLS_KEY_FILE: tls.keyPath },
  });
  url = stack.intakeUrl.replace(/^http:/, "https:");
  h1 = new Agent({ connect: { ca: cert } });
  h2 = new Agent({ connect: { ca: cert }, allowH2: true });
});
afterAll(async () => {
  await Promise.allSettled([h1?.close(), h2?.close()]);
  await stack?.stop();
  tls?.dispose();
});

describe("TLS with ALPN", () => {
  it("serves the official openai SDK over HTTP/2, streamed and not", async () => {
    const client = new OpenAI({
      apiKey: API_KEY,
      baseURL: `${url}/v1`,
      maxRetries: 0,
      fetch: undiciFetch as unknown as typeof fetch,
      fetchOptions: { dispatcher: h2 } as never,
    });
    const messages = [{ role: "user" as const, content: "Say hello" }];
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages })
      .withResponse();
    expect(data.choices[0]?.message.content).toBeTruthy();
    expect(parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!).node).toBe("h100-a");
    let text = "";
    for await (const c of await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
    })) {
      text += c.choices[0]?.delta.content ?? "";
    }
    expect(text.length).toBeGreaterThan(0);
  });

  it("speaks HTTP/2 when offered (checked with node:http2) and HTTP/1.1 otherwise", async () => {
    const session = h2connect(url, { ca: cert });
    try {
      const answer = await new Promise<{ headers: IncomingHttpHeaders; body: string }>(
        (resolve, reject) => {
          const s = session.request({
            ":method": "POST",
            ":path": "/v1/chat/completions",
            ...authHeaders(),
          });
          let body = "";
          let headers: IncomingHttpHeaders = {};
          s.setEncoding("utf8");
          s.on("response", (h) => (headers = h));
          s.on("data", (c: string) => (body += c));
          s.on("end", () => resolve({ headers, body }));
          s.on("error", reject);
          s.end(chatBody());
        },
      );
      expect(answer.headers[":status"]).toBe(200);
      expect(parseRoutingHeader(String(answer.headers[ROUTING_HTTP_HEADER])).family).toBe("H100");
      expect(JSON.parse(answer.body).object).toBe("chat.completion");
    } finally {
      session.close();
    }
    const res = await request(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(),
      body: chatBody(),
      dispatcher: h1,
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers[ROUTING_HTTP_HEADER]).toBeTruthy();
    await res.body.text();
  });
});

describe("a client that goes away", () => {
  const slow = () => stack.sims.get("slow-a")!;

  it.each([
    ["HTTP/1.1", true, () => h1],
    ["HTTP/1.1", false, () => h1],
    ["HTTP/2", true, () => h2],
  ] as const)(
    "over %s (stream=%s) aborts the node call and frees its slot",
    async (_v, stream, agent) => {
      const completedBefore = slow().stats().completed;
      const controller = new AbortController();
      const pending = request(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: authHeaders(),
        body: chatBody({ model: "slow-model", stream }),
        dispatcher: agent(),
        signal: controller.signal,
      });
      if (stream) {
        const res = await pending;
        expect(res.statusCode).toBe(200);
        // Wait for the first bytes so the node is mid-answer.
        res.body.on("error", () => undefined);
        await once(res.body, "data");
      } else {
        pending.catch(() => undefined);
        await pollUntil(() => slow().stats().in_flight === 1, { message: "node call running" });
      }
      controller.abort();
      await pollUntil(() => slow().stats().in_flight === 0, {
        timeoutMs: 15_000,
        message: "node call aborted and its slot freed",
      });
      // 200 tokens at 5 per second would take 40 s: the call was cut, not completed.
      expect(slow().stats().completed).toBe(completedBefore);
    },
  );
});
