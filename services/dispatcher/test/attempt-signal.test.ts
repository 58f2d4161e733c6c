// The attempt signal's two limits (first byte, deadline) and the client's cancel, on fake
// timers: which one cuts the call, with what reason, and that nothing is left behind.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { attemptSignal } from "../src/route/attempt-signal.ts";

beforeEach(() => vi.useFakeTimers({ now: 1_000_000 }));
afterEach(() => vi.useRealTimers());

const limits = (firstByteMs: number, deadlineInMs: number) => ({
  firstByteMs,
  deadline: Date.now() + deadlineInMs,
  clock: Date.now,
});
const reason = (s: AbortSignal) => s.reason as DOMException;

describe("attemptSignal", () => {
  it("cuts a node silent past its first-byte limit at that limit, not later or earlier", () => {
    const a = attemptSignal(new AbortController().signal, limits(600, 5_000));
    vi.advanceTimersByTime(599);
    expect(a.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(a.signal.aborted).toBe(true);
    expect(reason(a.signal).name).toBe("TimeoutError");
    expect(reason(a.signal).message).toMatch(/no first byte .* 600 ms/);
    a.dispose();
  });

  it("once the first byte arrived, only the deadline cuts", () => {
    const a = attemptSignal(new AbortController().signal, limits(600, 2_000));
    vi.advanceTimersByTime(300);
    a.firstByteArrived();
    vi.advanceTimersByTime(1_699);
    expect(a.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(a.signal.aborted).toBe(true);
    expect(reason(a.signal).message).toBe("request deadline passed");
    a.dispose();
  });

  it("a first-byte limit past the deadline leaves the deadline in charge", () => {
    const a = attemptSignal(new AbortController().signal, limits(30_000, 800));
    a.firstByteArrived(); // nothing to re-arm
    vi.advanceTimersByTime(800);
    expect(reason(a.signal).message).toBe("request deadline passed");
    a.dispose();
  });

  it("passes the client's cancel on with its reason", () => {
    const client = new AbortController();
    const a = attemptSignal(client.signal, limits(600, 5_000));
    client.abort(new Error("client went away"));
    expect(a.signal.aborted).toBe(true);
    expect((a.signal.reason as Error).message).toBe("client went away");
    a.dispose();
  });

  it("dispose leaves no timer and no listener", () => {
    const client = new AbortController();
    const a = attemptSignal(client.signal, limits(600, 5_000));
    a.firstByteArrived();
    a.dispose();
    expect(vi.getTimerCount()).toBe(0);
    client.abort();
    vi.advanceTimersByTime(10_000);
    expect(a.signal.aborted).toBe(false);
  });
});
