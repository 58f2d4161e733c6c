import { context, propagation, trace } from "@opentelemetry/api";
import type { TextMapPropagator } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  CompositePropagator,
  W3CBaggagePropagator,
  W3CTraceContextPropagator,
  parseKeyPairsIntoRecord,
} from "@opentelemetry/core";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type * as OtlpHttp from "@opentelemetry/exporter-trace-otlp-http";
import type * as SdkNode from "@opentelemetry/sdk-node";
import type * as SdkTrace from "@opentelemetry/sdk-trace";
import type { SpanProcessor } from "@opentelemetry/sdk-trace";
import { PropagatingTracerProvider } from "./propagating-tracer.ts";

/*
 * The SDK and the exporter are loaded only by a process that exports spans: together they
 * are some 20 MiB of resident memory (module code and what it builds at load) that a
 * service without an exporter would carry for nothing.
 */
const require = createRequire(import.meta.url);
// The ES module builds, as a static import would resolve them, so that they share this
// process's one instance of @opentelemetry/api (a second, CommonJS one would keep its own
// proxy tracer provider, and tracers obtained before the SDK started would never see it).
const load = (name: string): unknown => require(fileURLToPath(import.meta.resolve(name)));
const sdkNode = () => load("@opentelemetry/sdk-node") as typeof SdkNode;
const sdkTrace = () => load("@opentelemetry/sdk-trace") as typeof SdkTrace;
const otlpHttp = () => load("@opentelemetry/exporter-trace-otlp-http") as typeof OtlpHttp;

export interface TelemetryOptions {
  /** Becomes the `service.name` resource attribute. */
  serviceName: string;
  /** The process environment (or a test's stand-in); only `OTEL_*` keys are read. */
  env: Record<string, string | undefined>;
}

export interface Telemetry {
  /** Flushes pending spans, stops the SDK and unregisters its global providers. */
  shutdown(): Promise<void>;
}

/** The OTLP/HTTP traces URL the env asks for, resolved as the OTLP exporter spec says. */
export function otlpTracesUrl(env: Record<string, string | undefined>): string | undefined {
  const specific = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (specific) return specific;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!base) return undefined;
  return `${base.endsWith("/") ? base : `${base}/`}v1/traces`;
}

function otlpHeaders(env: Record<string, string | undefined>): Record<string, string> {
  return {
    ...parseKeyPairsIntoRecord(env.OTEL_EXPORTER_OTLP_HEADERS),
    ...parseKeyPairsIntoRecord(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS),
  };
}

/**
 * Starts the OpenTelemetry SDK for this process. Call it first in a service's `main.ts`,
 * before the app is built, and await `shutdown()` last when the process drains.
 *
 * - W3C trace-context and baggage propagators are always registered and spans always get
 *   real ids, so trace context flows through the service even when nothing is exported.
 *   Without an exporter spans are not recorded at all (their attributes and events are
 *   dropped as they are set): nothing would read them.
 * - Spans are exported over OTLP/HTTP (JSON) with a batch processor only when
 *   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set in `env`;
 *   `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` are honoured.
 * - No OTel metrics or logs pipeline is started whatever `OTEL_METRICS_EXPORTER` or
 *   `OTEL_LOGS_EXPORTER` say: metrics go through prom-client, logs through pino.
 * - No auto-instrumentation: spans are created by hand.
 * - `OTEL_SDK_DISABLED=true` turns all of this off; `shutdown()` then does nothing.
 */
export function startTelemetry(options: TelemetryOptions): Telemetry {
  const { env } = options;
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") {
    return { shutdown: () => Promise.resolve() };
  }

  const propagator = new CompositePropagator({
    propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()],
  });
  const url = otlpTracesUrl(env);
  if (url === undefined) return startPropagationOnly(propagator);

  const { NodeSDK } = sdkNode();
  const { BatchSpanProcessor } = sdkTrace();
  const { OTLPTraceExporter } = otlpHttp();
  const spanProcessor: SpanProcessor = new BatchSpanProcessor({
    exporter: new OTLPTraceExporter({ url, headers: otlpHeaders(env) }),
    // The standard variable, read from the given env like the exporter settings above.
    ...positiveInt(env.OTEL_BSP_SCHEDULE_DELAY, "scheduledDelayMillis"),
  });

  const sdk = new NodeSDK({
    serviceName: options.serviceName,
    textMapPropagator: propagator,
    spanProcessors: [spanProcessor],
    // Explicit empty lists stop NodeSDK from building OTLP metric/log exporters from env.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
  });
  sdk.start();

  let stopped: Promise<void> | undefined;
  return {
    shutdown() {
      stopped ??= sdk.shutdown().finally(() => {
        // NodeSDK leaves its globals registered; clearing them lets a later start (tests,
        // embedded use) register fresh ones instead of being refused as duplicates.
        trace.disable();
        propagation.disable();
        context.disable();
      });
      return stopped;
    },
  };
}

/**
 * Without an exporter no span is ever read, so none is recorded: the context manager and the
 * propagators are registered as the SDK would, with a tracer provider whose spans only carry
 * ids (see {@link PropagatingTracerProvider}). A TracerProvider must exist, or spans would be
 * non-recording with all-zero ids and there would be nothing to propagate.
 */
function startPropagationOnly(propagator: TextMapPropagator): Telemetry {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(propagator);
  trace.setGlobalTracerProvider(new PropagatingTracerProvider());
  let stopped: Promise<void> | undefined;
  return {
    shutdown() {
      stopped ??= Promise.resolve().then(() => {
        trace.disable();
        propagation.disable();
        context.disable();
      });
      return stopped;
    },
  };
}

function positiveInt<K extends string>(
  value: string | undefined,
  key: K,
): Partial<Record<K, number>> {
  const n = Number(value);
  return value !== undefined && Number.isInteger(n) && n > 0
    ? ({ [key]: n } as Partial<Record<K, number>>)
    : {};
}
