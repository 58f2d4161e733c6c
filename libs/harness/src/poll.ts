export interface PollOptions {
  /** Give up after this long; default 10 000 ms. */
  timeoutMs?: number;
  /** Pause between attempts; default 25 ms. */
  intervalMs?: number;
  /** What was awaited, for the timeout error, e.g. `"nats-server to accept connections"`. */
  message?: string;
  /** Stops polling early; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The condition polled by {@link pollUntil} did not hold in time. */
export class PollTimeoutError extends Error {
  readonly code = "poll_timeout";
  /** The last error the probe threw, if it threw at all. */
  readonly lastError: unknown;
  constructor(message: string, lastError: unknown) {
    super(message, lastError === undefined ? undefined : { cause: lastError });
    this.name = "PollTimeoutError";
    this.lastError = lastError;
  }
}

const EXPIRED = Symbol("expired");

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Calls `probe` every `intervalMs` until it returns (or resolves to) a truthy value, and
 * resolves with that value. A probe that throws counts as "not yet"; its error is kept and
 * reported if time runs out. The deadline holds even when a probe hangs.
 *
 * @throws {PollTimeoutError} when no attempt succeeds within `timeoutMs`.
 */
export async function pollUntil<T>(
  probe: () => T | undefined | false | null | Promise<T | undefined | false | null>,
  options: PollOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const intervalMs = options.intervalMs ?? 25;
  const { signal } = options;
  signal?.throwIfAborted();

  let deadline: NodeJS.Timeout | undefined;
  const expired = new Promise<typeof EXPIRED>((resolve) => {
    deadline = setTimeout(() => resolve(EXPIRED), timeoutMs);
  });
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal?.reason as Error);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
  // Never let the abort promise surface as unhandled when nobody is racing it any more.
  aborted.catch(() => undefined);

  let lastError: unknown;
  let attempts = 0;
  try {
    for (;;) {
      attempts += 1;
      const attempt = Promise.resolve()
        .then(probe)
        .then(
          (value) => ({ value }),
          (error: unknown) => {
            lastError = error;
            return { value: undefined };
          },
        );
      const outcome = await Promise.race([attempt, expired, aborted]);
      if (outcome === EXPIRED) break;
      if (outcome.value) return outcome.value;

      let pause: NodeJS.Timeout | undefined;
      const slept = await Promise.race([
        new Promise<void>((resolve) => (pause = setTimeout(resolve, intervalMs))),
        expired,
        aborted,
      ]);
      clearTimeout(pause);
      if (slept === EXPIRED) break;
    }
  } finally {
    clearTimeout(deadline);
    if (onAbort) signal?.removeEventListener("abort", onAbort);
  }

  const what = options.message ?? "condition";
  const suffix = lastError === undefined ? "" : `; last error: ${errorText(lastError)}`;
  throw new PollTimeoutError(
    `timed out after ${timeoutMs} ms (${attempts} attempts) waiting for ${what}${suffix}`,
    lastError,
  );
}
