export interface ShutdownLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/**
 * Runs `stop` once on SIGTERM or SIGINT, then exits. A second signal, or `stop` taking longer
 * than `graceMs`, exits at once so an orchestrator's kill never waits on a stuck drain.
 */
export function onShutdownSignal(
  log: ShutdownLogger,
  stop: () => Promise<void>,
  graceMs = 10_000,
): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    log.info({ signal }, "shutting down");
    const timer = setTimeout(() => {
      log.error({ graceMs }, "shutdown took too long; exiting");
      process.exit(1);
    }, graceMs);
    timer.unref();
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err: String(err) }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handler);
  process.on("SIGINT", handler);
}
