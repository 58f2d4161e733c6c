import type { Bindings, ChildLoggerOptions, Level, LevelWithSilentOrString, Logger } from "pino";

type LogFn = Logger["info"];

/**
 * A child logger that is built only when it first writes a line. A pino child serialises
 * (and, with redaction on, redacts) its bindings when created; a per-request child whose
 * every call is below the level (a request that logs nothing at `warn`) need not pay that.
 * Writes at an enabled level, `child()` and anything else go to the real child, made once.
 */
class LazyChild {
  #parent: Logger;
  #bindings: Bindings;
  #options: ChildLoggerOptions | undefined;
  #real: Logger | undefined;

  constructor(parent: Logger, bindings: Bindings, options?: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  /** The real child, built on first need. */
  get real(): Logger {
    return (this.#real ??= this.#parent.child(this.#bindings, this.#options));
  }

  get level(): string {
    return this.#real?.level ?? this.#parent.level;
  }

  isLevelEnabled(level: LevelWithSilentOrString): boolean {
    return (this.#real ?? this.#parent).isLevelEnabled(level);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.real.child(bindings, options);
  }

  #write(level: Level, args: Parameters<LogFn>): void {
    if (!this.isLevelEnabled(level)) return;
    this.real[level](...args);
  }

  trace(...args: Parameters<LogFn>): void {
    this.#write("trace", args);
  }
  debug(...args: Parameters<LogFn>): void {
    this.#write("debug", args);
  }
  info(...args: Parameters<LogFn>): void {
    this.#write("info", args);
  }
  warn(...args: Parameters<LogFn>): void {
    this.#write("warn", args);
  }
  error(...args: Parameters<LogFn>): void {
    this.#write("error", args);
  }
  fatal(...args: Parameters<LogFn>): void {
    this.#write("fatal", args);
  }
  silent(): void {}
}

/**
 * `parent.child(bindings)`, built lazily (see {@link LazyChild}). Only the logging methods,
 * `level`, `isLevelEnabled` and `child` are offered without building it; the services use no
 * other part of a request's logger.
 */
export function lazyChild(
  parent: Logger,
  bindings: Bindings,
  options?: ChildLoggerOptions,
): Logger {
  return new LazyChild(parent, bindings, options) as unknown as Logger;
}
