import { z } from "zod";

export interface ShutdownLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/**
 * The graceful-stop settings every service reads (spread into its config schema).
 *
 * - `ZML_SHUTDOWN_GRACE_MS`: how long in-flight work may take to finish once a stop began;
 *   what is still running then is handed back (batch jobs) or ended with a retryable error.
 *   Keep it below the orchestrator's kill grace (Kubernetes: `terminationGracePeriodSeconds`).
 * - `ZML_SHUTDOWN_NOT_READY_MS`: how long the service keeps serving while its readiness
 *   already fails, so load balancers stop sending to it before it stops taking work
 *   (0 in development; a few seconds under Kubernetes, whose endpoints follow readiness).
 */
export const SHUTDOWN_CONFIG_SHAPE = {
  ZML_SHUTDOWN_GRACE_MS: z.coerce.number().int().min(100).max(600_000).default(20_000),
  ZML_SHUTDOWN_NOT_READY_MS: z.coerce.number().int().nonnegative().max(120_000).default(0),
};

export interface ShutdownSettings {
  ZML_SHUTDOWN_GRACE_MS: number;
  ZML_SHUTDOWN_NOT_READY_MS: number;
}

/** What a service's stop is handed: until when in-flight work may run. */
export interface StopContext {
  /** Epoch ms by which in-flight work must be finished or handed back. */
  deadline: number;
}

export interface Shutdown {
  /**
   * True from the first SIGTERM/SIGINT on. Readiness reports not-ready from that moment,
   * before the service stops taking work.
   */
  readonly stopping: boolean;
  /**
   * What runs on the signal, after the not-ready delay; the process exits 0 once it
   * resolves. A signal before this is registered (still starting) exits 0 at once.
   */
  onStop(stop: (context: StopContext) => Promise<void>): void;
}

/** Margin kept between the work deadline and the forced exit, for closing connections. */
const CLOSE_MARGIN_MS = 5_000;

/**
 * Graceful stop on SIGTERM or SIGINT: not-ready first, then (after `ZML_SHUTDOWN_NOT_READY_MS`)
 * the registered stop with a deadline `ZML_SHUTDOWN_GRACE_MS` away, then exit 0. A second
 * signal, a failing stop, or a stop still running `CLOSE_MARGIN_MS` past the deadline exits
 * 1 at once, so an orchestrator's kill never waits on a stuck drain.
 */
export function createShutdown(
  log: ShutdownLogger,
  settings: ShutdownSettings,
  clock: () => number = Date.now,
): Shutdown {
  let stopping = false;
  let stop: ((context: StopContext) => Promise<void>) | undefined;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    const notReadyMs = settings.ZML_SHUTDOWN_NOT_READY_MS;
    const graceMs = settings.ZML_SHUTDOWN_GRACE_MS;
    log.info({ signal, not_ready_ms: notReadyMs, grace_ms: graceMs }, "shutting down");
    if (!stop) process.exit(0);
    const run = stop;
    const forced = setTimeout(
      () => {
        log.error({ grace_ms: graceMs }, "shutdown took too long; exiting");
        process.exit(1);
      },
      notReadyMs + graceMs + CLOSE_MARGIN_MS,
    );
    forced.unref();
    const begin = () =>
      run({ deadline: clock() + graceMs }).then(
        () => {
          log.info({}, "stopped");
          process.exit(0);
        },
        (err: unknown) => {
          log.error({ err: String(err) }, "shutdown failed");
          process.exit(1);
        },
      );
    if (notReadyMs > 0) setTimeout(() => void begin(), notReadyMs);
    else void begin();
  };
  process.on("SIGTERM", handler);
  process.on("SIGINT", handler);
  return {
    get stopping() {
      return stopping;
    },
    onStop(fn) {
      stop = fn;
    },
  };
}

/** Counts async work in progress (e.g. request handlers), for a stop to wait on. */
export interface WorkCounter {
  /** Runs `work`, counted until it settles. */
  run<T>(work: () => Promise<T>): Promise<T>;
  count(): number;
}

export function createWorkCounter(): WorkCounter {
  let running = 0;
  return {
    async run(work) {
      running++;
      try {
        return await work();
      } finally {
        running--;
      }
    },
    count: () => running,
  };
}

/**
 * Resolves once `isDone()` holds or the deadline passes, checking every `everyMs`; true
 * when it held. For draining: "wait until nothing is in flight, but not past the bound".
 */
export async function waitUntil(
  isDone: () => boolean,
  deadline: number,
  clock: () => number = Date.now,
  everyMs = 50,
): Promise<boolean> {
  while (!isDone()) {
    if (clock() >= deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return true;
}
