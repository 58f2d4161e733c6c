export { createLogger, REDACT_PATHS, REDACTED } from "./logger.ts";
export type { Logger, LoggerOptions, DestinationStream } from "./logger.ts";
export { lazyChild } from "./lazy-child.ts";
export { startTelemetry, otlpTracesUrl } from "./tracing.ts";
export type { Telemetry, TelemetryOptions } from "./tracing.ts";
export { createMetrics, withAttemptRegistry } from "./metrics.ts";
export type { Metrics, MetricsOptions } from "./metrics.ts";
export { startOpsServer } from "./ops-server.ts";
export type { OpsServer, OpsServerOptions } from "./ops-server.ts";

/**
 * prom-client metric classes, re-exported so services need no direct dependency. Pass
 * `registers: [metrics.registry]`, never the global registry.
 */
export { Counter, Gauge, Histogram, Registry } from "prom-client";

/**
 * The OpenTelemetry API for hand-made spans and context propagation, re-exported so
 * services depend on one telemetry package. Works as a no-op until `startTelemetry` runs.
 */
export { context, propagation, trace, SpanKind, SpanStatusCode } from "@opentelemetry/api";
export type { Attributes, Context, Span, Tracer } from "@opentelemetry/api";
