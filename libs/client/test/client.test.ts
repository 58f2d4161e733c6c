import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, ZmlApiError, ZmlConnectionError } from "../src/index.ts";

/**
 * The client against a real HTTP server that speaks the gateway's wire format. The full
 * gateway is exercised by the e2e suite (test/e2e/sdk-*.test.ts).
 */

const ROUTING =
  'decision-id="d-1", node="h100-a", policy="interactive", family="H100", queue-depth=2, tier=1, attempts=1';
const KEY = "sdk-test-key";
let server: Server;
let baseUrl: string;
const seen: Array<{ url: string; headers: IncomingMessage["headers"]; body: string }> = [];

const chunk = (content: string) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;

function handle(req: IncomingMessage, res: ServerResponse, body: string) {
  seen.push({ url: req.url ?? "", headers: req.headers, body });
  if (req.headers.authorization !== `Bearer ${KEY}`) {
    res.writeHead(401, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        error: {
          message: "invalid API key",
          type: "authentication_error",
          param: "authorization",
          code: "unauthorized",
        },
      }),
    );
    return;
  }
  if (req.url === "/v1/models") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        object: "list",
        data: [{ id: "m", object: "model", created: 0, owned_by: "zml" }],
      }),
    );
    return;
  }
  const parsed = JSON.parse(body) as { model: string; stream?: boolean };
  const routed = { "x-zml-routing": ROUTING, "x-request-id": "r-1" };
  switch (parsed.model) {
    case "forbidden":
      res.writeHead(403, { "content-type": "application/json", "x-request-id": "r-1" });
      res.end(
        JSON.stringify({
          error: {
            message: "account may not use tier 3",
            type: "permission_error",
            param: "tier",
            code: "tier_not_allowed",
          },
        }),
      );
      return;
    case "busy":
      res.writeHead(503, { "content-type": "application/json", "retry-after": "2" });
      res.end(
        JSON.stringify({
          error: { message: "no node", type: "api_error", param: null, code: "no_node_available" },
        }),
      );
      return;
    case "no-header":
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
      return;
    case "broken":
      res.writeHead(200, { "content-type": "text/event-stream", ...routed });
      res.end(
        chunk("Hel") +
          'event: error\ndata: {"error":{"message":"node failed","type":"api_error","param":null,"code":"stream_interrupted"}}\n\n',
      );
      return;
    case "truncated":
      res.writeHead(200, { "content-type": "text/event-stream", ...routed });
      res.end(chunk("Hel"));
      return;
    case "endless":
      res.writeHead(200, { "content-type": "text/event-stream", ...routed });
      res.write(chunk("Hel"));
      return; // never ends: the client aborts
    default:
      break;
  }
  if (parsed.stream) {
    res.writeHead(200, { "content-type": "text/event-stream", ...routed });
    res.end(chunk("Hel") + chunk("lo") + "data: [DONE]\n\n");
    return;
  }
  res.writeHead(200, { "content-type": "application/json", ...routed });
  res.end(
    JSON.stringify({
      id: "c",
      object: "chat.completion",
      created: 0,
      model: parsed.model,
      choices: [
        { index: 0, message: { role: "assistant", content: "Hello" }, finish_reason: "stop" },
      ],
    }),
  );
}

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => handle(req, res, body));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const messages = [{ role: "user", content: "hi" }];

describe("infer", () => {
  const zml = () => createClient({ baseUrl: `${baseUrl}/v1/`, apiKey: KEY });

  it("returns the completion with routing parsed from the header", async () => {
    const res = await zml().infer(
      { model: "m", messages, policy: "interactive", fallback_models: ["n"] },
      { requestId: "mine-1" },
    );
    expect(res.choices[0]!.message.content).toBe("Hello");
    expect(res.routing).toEqual({
      decisionId: "d-1",
      node: "h100-a",
      policy: "interactive",
      family: "H100",
      queueDepth: 2,
      tier: 1,
      attempts: 1,
    });
    expect(res.requestId).toBe("r-1");
    const last = seen.at(-1)!;
    expect(last.url).toBe("/v1/infer");
    expect(last.headers["x-request-id"]).toBe("mine-1");
    expect(JSON.parse(last.body)).toEqual({
      model: "m",
      messages,
      policy: "interactive",
      fallback_models: ["n"],
    });
  });

  it("streams chunks as an async iterator, routing known up front", async () => {
    const stream = await zml().infer({ model: "m", messages, stream: true });
    expect(stream.routing.node).toBe("h100-a");
    let text = "";
    for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    expect(text).toBe("Hello");
  });

  it("chat() calls the OpenAI-compatible path", async () => {
    const res = await zml().chat({ model: "m", messages, temperature: 0 });
    expect(res.routing.family).toBe("H100");
    expect(seen.at(-1)!.url).toBe("/v1/chat/completions");
  });

  it("lists models", async () => {
    expect((await zml().models()).map((m) => m.id)).toEqual(["m"]);
  });
});

describe("errors", () => {
  const zml = () => createClient({ baseUrl, apiKey: KEY });
  const failure = async (p: Promise<unknown>) => {
    try {
      await p;
    } catch (e) {
      return e;
    }
    throw new Error("did not fail");
  };

  it("carries the API's status, code, param and Retry-After", async () => {
    const e = (await failure(zml().infer({ model: "forbidden", messages }))) as ZmlApiError;
    expect(e).toBeInstanceOf(ZmlApiError);
    expect([e.status, e.code, e.param, e.requestId]).toEqual([
      403,
      "tier_not_allowed",
      "tier",
      "r-1",
    ]);
    const busy = (await failure(zml().infer({ model: "busy", messages }))) as ZmlApiError;
    expect([busy.status, busy.code, busy.retryAfterS]).toEqual([503, "no_node_available", 2]);
    const denied = (await failure(
      createClient({ baseUrl, apiKey: "wrong" }).models(),
    )) as ZmlApiError;
    expect([denied.status, denied.code, denied.param]).toEqual([
      401,
      "unauthorized",
      "authorization",
    ]);
  });

  it("refuses an answer without a routing header", async () => {
    const e = (await failure(zml().infer({ model: "no-header", messages }))) as ZmlApiError;
    expect(e.code).toBe("invalid_response");
  });

  it("raises a stream's error event and a truncated stream, never a clean end", async () => {
    for (const [model, code] of [
      ["broken", "stream_interrupted"],
      ["truncated", "stream_interrupted"],
    ] as const) {
      const stream = await zml().infer({ model, messages, stream: true });
      const got: string[] = [];
      const e = (await failure(
        (async () => {
          for await (const c of stream) got.push(c.choices[0]?.delta.content ?? "");
        })(),
      )) as ZmlApiError;
      expect(e.code, model).toBe(code);
      expect(e.routing?.node).toBe("h100-a");
      expect(got).toEqual(["Hel"]);
    }
  });

  it("lets the caller abort a stream", async () => {
    const stream = await zml().infer({ model: "endless", messages, stream: true });
    const it = stream[Symbol.asyncIterator]();
    expect((await it.next()).done).toBe(false);
    stream.abort();
    await expect(it.next()).rejects.toThrow();
  });

  it("reports an unreachable gateway as a connection error", async () => {
    const e = await failure(createClient({ baseUrl: "http://127.0.0.1:1", apiKey: KEY }).models());
    expect(e).toBeInstanceOf(ZmlConnectionError);
  });
});
