/**
 * The abort signal of one node call: fires when the client goes away or the request's
 * deadline passes. Unlike `AbortSignal.timeout`, its timer is cleared as soon as the call
 * ends, so a finished request holds no timer, signal or context until its deadline.
 */
export function attemptSignal(
  cancelled: AbortSignal,
  timeoutMs: number,
): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const onCancel = () => controller.abort(cancelled.reason);
  cancelled.addEventListener("abort", onCancel, { once: true });
  const timer = setTimeout(
    () => controller.abort(new DOMException("request deadline passed", "TimeoutError")),
    Math.max(1, timeoutMs),
  );
  return {
    signal: controller.signal,
    dispose() {
      clearTimeout(timer);
      cancelled.removeEventListener("abort", onCancel);
    },
  };
}
