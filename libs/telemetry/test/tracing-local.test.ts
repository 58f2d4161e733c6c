import { propagation, context as otelContext } from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { context, createLogger, otlpTracesUrl, startTelemetry, trace } from "../src/index.ts";
import { captureStream } from "./capture.ts";

describe("startTelemetry without an exporter", () => {
  it("propagates W3C trace context and baggage, correlates logs, and shuts down", async () => {
    const telemetry = startTelemetry({ serviceName: "zml-intake-test", env: {} });
    const out = captureStream();
    const log = createLogger({ service: "intake", destination: out });

    const { carrier, traceId, spanId } = await trace
      .getTracer("test")
      .startActiveSpan("http.request", async (span) => {
        // Across an await, so this exercises the async context manager, not just a stack.
        await new Promise((resolve) => setImmediate(resolve));
        log.info("handling");
        const withBaggage = propagation.setBaggage(
          context.active(),
          propagation.createBaggage({ "zml.account": { value: "acme" } }),
        );
        const headers: Record<string, string> = {};
        propagation.inject(withBaggage, headers);
        span.end();
        return { carrier: headers, ...span.spanContext() };
      });

    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(traceId).not.toBe("0".repeat(32));
    expect(carrier.traceparent).toBe(`00-${traceId}-${spanId}-01`);
    expect(carrier.baggage).toBe("zml.account=acme");
    expect(out.lines()[0]).toMatchObject({ trace_id: traceId, span_id: spanId });

    await telemetry.shutdown();
    await telemetry.shutdown();
  });

  it("can start again after shutdown", async () => {
    const telemetry = startTelemetry({ serviceName: "zml-intake-test", env: {} });
    const headers: Record<string, string> = {};
    trace.getTracer("test").startActiveSpan("again", (span) => {
      propagation.inject(otelContext.active(), headers);
      span.end();
    });
    expect(headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    await telemetry.shutdown();
  });

  it("does nothing when OTEL_SDK_DISABLED=true", async () => {
    const telemetry = startTelemetry({
      serviceName: "zml-intake-test",
      env: { OTEL_SDK_DISABLED: "true", OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" },
    });
    const headers: Record<string, string> = {};
    trace.getTracer("test").startActiveSpan("off", (span) => {
      propagation.inject(otelContext.active(), headers);
      span.end();
    });
    expect(headers).toEqual({});
    await telemetry.shutdown();
  });
});

describe("otlpTracesUrl", () => {
  it("prefers the traces endpoint as given, else appends v1/traces to the base", () => {
    expect(otlpTracesUrl({})).toBeUndefined();
    expect(otlpTracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: "" })).toBeUndefined();
    expect(otlpTracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://jaeger:4318" })).toBe(
      "http://jaeger:4318/v1/traces",
    );
    expect(otlpTracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318/otlp/" })).toBe(
      "http://c:4318/otlp/v1/traces",
    );
    expect(
      otlpTracesUrl({
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://b:4318/custom",
      }),
    ).toBe("http://b:4318/custom");
  });
});
