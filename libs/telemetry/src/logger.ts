// Patches pino's redactor through its internals (skipRedactingPrimitives): see UPSTREAM.md.
import { hostname } from "node:os";
import { isSpanContextValid, trace } from "@opentelemetry/api";
import { pino } from "pino";
import type { DestinationStream, Logger } from "pino";

/**
 * Paths pino removes from every log line. Prompts, completions and credentials must never
 * reach the logs (docs/security.md), so request bodies and message arrays are dropped wholesale
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
    ...(stdout === undefined ? {} : { hooks: { logMethod: tellingStdout(stdout) } }),
  };
  const logger = pino(config, options.destination ?? stdout?.destination);
  skipRedactingPrimitives(logger);
  return logger;
}

/** A `logMethod` hook that tells the buffered stdout about each line it wrote. */
function tellingStdout(stdout: BufferedStdout) {
  return function logMethod(
    this: Logger,
    args: Parameters<Logger["info"]>,
    method: Logger["info"],
    level: number,
  ): void {
    method.apply(this, args);
    stdout.wrote(level);
  };
}

/** pino's number for `warn`. */
const WARN_LEVEL = pino.levels.values.warn!;

/** An `info` or `debug` line waits at most this long in the buffer before it is written. */
const STDOUT_FLUSH_MS = 100;

/** Lines are written once this many bytes are buffered: one system call per dozen lines. */
const STDOUT_BATCH_BYTES = 4096;

type SonicBoom = ReturnType<typeof pino.destination>;

interface BufferedStdout {
  destination: SonicBoom;
  /** A line of this pino level went to `destination`: a warning or worse is written now. */
  wrote(level: number): void;
}

let stdoutSingleton: BufferedStdout | undefined;

/**
 * Standard output, written in batches. pino writes each line with its own `write(2)` by
 * default; at one `request completed` line per request, that call took ~25 µs of intake's
 * time per request in a c16 profile (docs/performance.md, "Logging").
 *
 * Batches are written synchronously and in order: when {@link STDOUT_BATCH_BYTES} are
 * buffered, at once for a warning or worse (with every line before it), within
 * {@link STDOUT_FLUSH_MS} of any other line, and when the process exits (`process.exit`
 * included). A process killed outright (SIGKILL, out of memory) loses what it had buffered:
 * at most that long of info lines. The timer writes only after a line, so an idle process
 * makes no system calls for it. One destination per process, however many loggers use it.
 */
function bufferedStdout(): BufferedStdout {
  if (stdoutSingleton !== undefined) return stdoutSingleton;
  const destination = pino.destination({ dest: 1, sync: true, minLength: STDOUT_BATCH_BYTES });
  let unwritten = false;
  const flush = () => {
    unwritten = false;
    destination.flush();
  };
  setInterval(() => {
    if (unwritten) flush();
  }, STDOUT_FLUSH_MS).unref();
  process.once("exit", () => {
    try {
      destination.flushSync();
    } catch {
      // Nothing more can be written (a closed stdout): the process is ending anyway.
    }
  });
  stdoutSingleton = {
    destination,
    wrote(level) {
      if (level >= WARN_LEVEL) flush();
      else unwritten = true;
    },
  };
  return stdoutSingleton;
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
 * differently: pino is pinned exactly (package.json) for that reason, and `logger.test.ts`
 * checks {@link skipsRedactingPrimitives}, so an upgrade that loses this fails a test.
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
  stringifiers![wildcardFirstSym] = skippingPrimitives((value: unknown, stringifySafe?: unknown) =>
    typeof value === "object" && value !== null
      ? redactNested(value, stringifySafe)
      : plain(value, stringifySafe),
  );
}

const installed = new WeakSet<Stringifier>();

function skippingPrimitives(stringifier: Stringifier): Stringifier {
  installed.add(stringifier);
  return stringifier;
}

/** Whether `logger`'s lines take the shortcut above (false: pino's internals moved). */
export function skipsRedactingPrimitives(logger: Logger): boolean {
  const { stringifiersSym, wildcardFirstSym } = pino.symbols;
  const stringifiers = (logger as unknown as Record<symbol, unknown>)[stringifiersSym] as
    Record<symbol, unknown> | undefined;
  const nested = stringifiers?.[wildcardFirstSym];
  return typeof nested === "function" && installed.has(nested as Stringifier);
}

export type { Logger, DestinationStream };
