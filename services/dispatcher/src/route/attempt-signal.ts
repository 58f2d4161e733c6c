/**
 * The abort signal of one node call: fires when the client goes away, when the node has not
 * started answering within the attempt's first-byte limit (no response headers; for a stream,
 * no first event: its headers alone are not an answer, see `callNode`), or when the request's
 * deadline passes.
 *
 * Both limits run on one native timer, on purpose. undici's own `headersTimeout` runs on its
 * coarse "fast timers" (ticks of about 0.5 s), which fire a 600 ms limit anywhere from about
 * 0.5 s to 1 s after it was set: a first-byte limit could cut an attempt early and start the
 * next one a hundred milliseconds before the deadline (seen in CI as an answer where
 * `gateway_timeout` was due). Unlike `AbortSignal.timeout`, the timer is cleared as soon as
 * the call ends, so a finished request holds no timer, signal or context until its deadline.
 */
export interface AttemptSignal {
  signal: AbortSignal;
  /** The node's answer started: from now on only the deadline (and the client) cut. */
  firstByteArrived(this: void): void;
  dispose(this: void): void;
}

export interface AttemptLimits {
  /** How long the node has to start answering. */
  firstByteMs: number;
  /** The request's deadline, on `clock`. */
  deadline: number;
  clock: () => number;
}

export function attemptSignal(cancelled: AbortSignal, limits: AttemptLimits): AttemptSignal {
  const controller = new AbortController();
  const onCancel = () => controller.abort(cancelled.reason);
  cancelled.addEventListener("abort", onCancel, { once: true });
  const abortAfter = (ms: number, message: string) =>
    setTimeout(() => controller.abort(new DOMException(message, "TimeoutError")), Math.max(1, ms));
  const untilDeadline = () => limits.deadline - limits.clock();
  const remaining = untilDeadline();
  // Only a first-byte limit shorter than the time left needs a timer of its own.
  let waitingForFirstByte = limits.firstByteMs < remaining;
  let timer = waitingForFirstByte
    ? abortAfter(limits.firstByteMs, `no first byte from the node in ${limits.firstByteMs} ms`)
    : abortAfter(remaining, "request deadline passed");
  return {
    signal: controller.signal,
    firstByteArrived() {
      if (!waitingForFirstByte) return;
      waitingForFirstByte = false;
      clearTimeout(timer);
      timer = abortAfter(untilDeadline(), "request deadline passed");
    },
    dispose() {
      clearTimeout(timer);
      cancelled.removeEventListener("abort", onCancel);
    },
  };
}
