import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startTelemetry, trace } from "../src/index.ts";

interface Received {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

// A real OTLP/HTTP endpoint stand-in: records what the exporter posts.
function startReceiver(): Promise<{ server: Server; url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      received.push({
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({ server, url: `http://127.0.0.1:${port}`, received });
    });
  });
}

interface OtlpAttribute {
  key: string;
  value: { stringValue?: string };
}
interface OtlpTraces {
  resourceSpans: {
    resource: { attributes: OtlpAttribute[] };
    scopeSpans: { spans: { name: string; traceId: string; attributes: OtlpAttribute[] }[] }[];
  }[];
}

describe("startTelemetry with an OTLP endpoint", () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  beforeAll(async () => {
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await new Promise((resolve) => receiver.server.close(resolve));
  });

  it("exports hand-made spans to <endpoint>/v1/traces with the service name", async () => {
    const telemetry = startTelemetry({
      serviceName: "zml-dispatcher-test",
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_HEADERS: "x-tenant=zml",
      },
    });
    let traceId = "";
    trace.getTracer("test").startActiveSpan("route.decide", (span) => {
      span.setAttribute("zml.policy", "balanced");
      traceId = span.spanContext().traceId;
      span.end();
    });
    await telemetry.shutdown();

    const post = await vi.waitFor(
      () => {
        const hit = receiver.received.find((r) => r.method === "POST" && r.url === "/v1/traces");
        if (!hit) throw new Error("no POST /v1/traces yet");
        return hit;
      },
      { timeout: 10_000, interval: 25 },
    );
    expect(post.headers["x-tenant"]).toBe("zml");
    const doc = JSON.parse(post.body) as OtlpTraces;
    const resource = doc.resourceSpans[0]!.resource.attributes;
    expect(resource).toContainEqual({
      key: "service.name",
      value: { stringValue: "zml-dispatcher-test" },
    });
    const spans = doc.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans));
    const span = spans.find((s) => s.name === "route.decide");
    expect(span).toBeDefined();
    expect(span!.traceId).toBe(traceId);
    expect(span!.attributes).toContainEqual({
      key: "zml.policy",
      value: { stringValue: "balanced" },
    });
  });
});
