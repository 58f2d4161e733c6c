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
 *
 * Without a destination, lines go to stdout in batches (see {@link bufferedStdout}).
 */
export function createLogger(options: LoggerOptions): Logger {
  const stdout = options.destination === undefined ? bufferedStdout() : undefined;
  const config = {
    level: options.level ?? "info",
    base: { service: options.service, hostname: hostname(), pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    mixin: traceMixin,
    ...(stdout === undefined ? {} : { hooks: { logMethod: flushingWarnings(stdout) } }),
  };
  const logger = pino(config, options.destination ?? stdout);
  skipRedactingPrimitives(logger);
  return logger;
}

/** A `logMethod` hook that writes a warning or worse at once, with every line before it. */
function flushingWarnings(stdout: SonicBoom) {
  return function logMethod(
    this: Logger,
    args: Parameters<Logger["info"]>,
    method: Logger["info"],
    level: number,
  ): void {
    method.apply(this, args);
    if (level >= WARN_LEVEL) stdout.flush();
  };
}

/** pino's number for `warn`. */
const WARN_LEVEL = 40;

/** An `info` or `debug` line waits at most this long in the buffer before it is written. */
const STDOUT_FLUSH_MS = 100;

/** Lines are written once this many bytes are buffered: one system call per dozen lines. */
const STDOUT_BATCH_BYTES = 4096;

type SonicBoom = ReturnType<typeof pino.destination>;

let stdoutDestination: SonicBoom | undefined;

/**
 * Standard output, written in batches. pino writes each line with its own `write(2)` by
 * default; at one `request completed` line per request, that call took ~25 µs of intake's
 * time per request in a c16 profile (docs/performance.md, "Logging"). Batches are written synchronously, in order:
 * when {@link STDOUT_BATCH_BYTES} are buffered, every {@link STDOUT_FLUSH_MS}, at once for a
 * warning or worse, and when the process exits (`process.exit` included). What a process
 * killed outright (SIGKILL, out of memory) had buffered, at most that long of info lines, is
 * lost. One destination per process, however many loggers use it.
 */
function bufferedStdout(): SonicBoom {
  if (stdoutDestination !== undefined) return stdoutDestination;
  const destination = pino.destination({
    dest: 1,
    sync: true,
    minLength: STDOUT_BATCH_BYTES,
    periodicFlush: STDOUT_FLUSH_MS,
  });
  process.once("exit", () => {
    try {
      destination.flushSync();
    } catch {
      // Nothing more can be written (a closed stdout): the process is ending anyway.
    }
  });
  stdoutDestination = destination;
  return destination;
}

type Stringifier = (value: unknown, stringifySafe?: unknown) => string | undefined;

/**
 * pino hands every top-level value of a line, and the message, to the redactor of the
 * `*.…` paths. That redactor parses each of its paths again on every call, even for a string
 * or a number, where all it can do is return `stringify(value)`: about 20 µs of a 30 µs line
 * (docs/performance.md, "Logging"). Here a value that is not an object gets that result
 * directly; objects still go through the redactor, so every line is written as before
 * (`logger.test.ts` compares them with pino's own). Children share the root's stringifiers,
 * so this covers every child logger too. Left as it is should a pino release lay them out
 * differently.
 */
function skipRedactingPrimitives(logger: Logger): void {
  const { stringifiersSym, stringifySym, wildcardFirstSym } = pino.symbols;
  const internals = logger as unknown as Record<symbol, unknown>;
  const stringifiers = internals[stringifiersSym] as Record<symbol, unknown> | undefined;
  const nested = stringifiers?.[wildcardFirstSym];
  const stringify = internals[stringifySym];
  if (typeof nested !== "function" || typeof stringify !== "function") return;
  const redactNested = nested as Stringifier;
  const plain = stringify as Stringifier;
  stringifiers![wildcardFirstSym] = (value: unknown, stringifySafe?: unknown) =>
    typeof value === "object" && value !== null
      ? redactNested(value, stringifySafe)
      : plain(value, stringifySafe);
}

export type { Logger, DestinationStream };
