import { backoffDelayMs } from "@zml/contracts";

export interface StartRetryLogger {
  warn(obj: object, msg?: string): void;
}

export interface StartWhenPossibleOptions {
  /** What is starting, for the log line, e.g. `"dispatcher"`. */
  what: string;
  log: StartRetryLogger;
  /** First pause after a failure; doubled each time up to `maxDelayMs`. Default 500 ms. */
  firstDelayMs?: number;
  /** Default 5 000 ms. */
  maxDelayMs?: number;
  /** Errors that retrying cannot fix (bad configuration): thrown at once. */
  isPermanent?: (error: unknown) => boolean;
  /** Stops retrying (a shutdown signal arrived); rejects with the signal's reason. */
  signal?: AbortSignal;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason as Error);
      },
      { once: true },
    );
  });
}

/**
 * Runs `start` until it succeeds, pausing with capped exponential backoff between attempts.
 * A service started while a NATS server (or JetStream's quorum) is away would otherwise exit
 * on its first timeout, and an orchestrator would restart it in a loop; this way it stays up,
 * reports not-ready, and becomes ready once its buckets and streams answer again.
 *
 * Every failure is logged as a warning with its error and the attempt number.
 */
export async function startWhenPossible<T>(
  start: () => Promise<T>,
  options: StartWhenPossibleOptions,
): Promise<T> {
  const sleep = options.sleep ?? defaultSleep;
  const backoff = { firstMs: options.firstDelayMs ?? 500, maxMs: options.maxDelayMs ?? 5_000 };
  for (let attempt = 1; ; attempt++) {
    options.signal?.throwIfAborted();
    try {
      return await start();
    } catch (error) {
      if (options.isPermanent?.(error) || options.signal?.aborted) throw error;
      const delayMs = backoffDelayMs(backoff, attempt);
      options.log.warn(
        {
          err: error instanceof Error ? error.message : String(error),
          attempt,
          retry_in_ms: delayMs,
        },
        `${options.what} could not start yet; retrying`,
      );
      await sleep(delayMs, options.signal);
    }
  }
}
