import { hostname } from "node:os";
import { isSpanContextValid, trace } from "@opentelemetry/api";
import { pino } from "pino";
import type { DestinationStream, Logger } from "pino";

/**
 * Paths pino removes from every log line. Prompts, completions and credentials must never
 * reach the logs (design §7), so request bodies and message arrays are dropped wholesale
 * wherever they appear at the top level or one level down.
 */
export const REDACT_PATHS: readonly string[] = [
  "authorization",
  "*.authorization",
  "headers.authorization",
  "*.headers.authorization",
  "req.headers.authorization",
  'headers["x-api-key"]',
  '*.headers["x-api-key"]',
  "apiKey",
  "*.apiKey",
  "api_key",
  "*.api_key",
  "body",
  "*.body",
  "prompt",
  "*.prompt",
  "messages",
  "*.messages",
  "content",
  "*.content",
  "completion",
  "*.completion",
  "choices",
  "*.choices",
];

/** The value that replaces a redacted field. */
export const REDACTED = "[redacted]";

export interface LoggerOptions {
  /** Service name, written as the `service` field of every line. */
  service: string;
  /** pino level name (`trace` … `fatal`, or `silent`); defaults to `info`. */
  level?: string;
  /** Where lines go; defaults to stdout. Tests pass a stream they can read. */
  destination?: DestinationStream;
}

/**
 * Adds the ids of the active OpenTelemetry span so a log line can be found from its trace
 * in Jaeger and back. Nothing is added outside a span, or inside a non-sampled/invalid one.
 */
function traceMixin(): Record<string, string> {
  const span = trace.getActiveSpan();
  if (span === undefined) return {};
  const ctx = span.spanContext();
  if (!isSpanContextValid(ctx)) return {};
  return { trace_id: ctx.traceId, span_id: ctx.spanId };
}

/**
 * Creates the JSON logger every service uses.
 *
 * Each line carries `service`, `hostname`, `pid`, an ISO `time`, the level as a label
 * (`"level":"info"`), and `trace_id`/`span_id` when logged inside an active span. Fields
 * listed in {@link REDACT_PATHS} are replaced by {@link REDACTED}; anything interpolated
 * into the message string itself is not (never put payloads in messages).
 */
export function createLogger(options: LoggerOptions): Logger {
  const config = {
    level: options.level ?? "info",
    base: { service: options.service, hostname: hostname(), pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    mixin: traceMixin,
  };
  return options.destination === undefined ? pino(config) : pino(config, options.destination);
}

export type { Logger, DestinationStream };
