import { describe, expect, it } from "vitest";
import { FIRST_BYTE_FLOOR_MS, firstByteTimeoutMs } from "../src/index.ts";
import { policy } from "./fixtures.ts";

const stream = (attempt: number, remainingMs: number) => ({
  attempt,
  remainingMs,
  stream: true,
  headersTimeoutMs: 30_000,
});

describe("first-byte timeout per attempt", () => {
  it("a streamed request waits its policy's latency target, within floor and cap", () => {
    expect(firstByteTimeoutMs(policy({ latency_target_ms: 2_000 }), stream(1, 60_000))).toBe(2_000);
    expect(firstByteTimeoutMs(policy({ latency_target_ms: 200 }), stream(1, 60_000))).toBe(
      FIRST_BYTE_FLOOR_MS,
    );
    expect(firstByteTimeoutMs(policy({ latency_target_ms: 90_000 }), stream(1, 600_000))).toBe(
      30_000,
    );
  });

  it("the attempts still to come fit in the time left", () => {
    const p = policy({ latency_target_ms: 20_000 });
    // 3 attempts in 30 s: 10 s each, whatever the target says.
    expect(firstByteTimeoutMs(p, stream(1, 30_000))).toBe(10_000);
    expect(firstByteTimeoutMs(p, stream(2, 20_000))).toBe(10_000);
    expect(firstByteTimeoutMs(p, stream(3, 9_000))).toBe(9_000);
    // Never past the deadline, even at the floor.
    expect(firstByteTimeoutMs(p, stream(3, 400))).toBe(400);
  });

  it("a plain answer keeps the dispatcher's headers timeout: its headers come after generation", () => {
    const p = policy({ latency_target_ms: 2_000 });
    expect(firstByteTimeoutMs(p, { ...stream(1, 60_000), stream: false })).toBe(30_000);
    expect(firstByteTimeoutMs(p, { ...stream(1, 10_000), stream: false })).toBe(10_000);
  });

  it("the policy's first_byte_timeout_ms overrides, for streams and plain answers", () => {
    const p = policy({ latency_target_ms: 2_000, first_byte_timeout_ms: 7_000 });
    expect(firstByteTimeoutMs(p, stream(1, 60_000))).toBe(7_000);
    expect(firstByteTimeoutMs(p, { ...stream(1, 60_000), stream: false })).toBe(7_000);
    expect(firstByteTimeoutMs(p, stream(1, 5_000))).toBe(5_000);
  });
});
