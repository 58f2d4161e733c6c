import { describe, expect, it } from "vitest";
import { FIRST_BYTE_FLOOR_MS, firstByteTimeoutMs, PLAIN_ANSWER_HEADROOM } from "../src/index.ts";
import { policy } from "./fixtures.ts";

const stream = (attempt: number, remainingMs: number) => ({
  attempt,
  remainingMs,
  stream: true,
  expectedResponseMs: 0,
  headersTimeoutMs: 30_000,
});
const plain = (attempt: number, remainingMs: number, expectedResponseMs: number) => ({
  ...stream(attempt, remainingMs),
  stream: false,
  expectedResponseMs,
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

  it("a plain answer waits its policy's latency target, or longer for a longer answer expected", () => {
    const p = policy({ latency_target_ms: 2_000 });
    // A short answer: the target.
    expect(firstByteTimeoutMs(p, plain(1, 60_000, 300))).toBe(2_000);
    // A long one: the headroom times its estimate, within the cap.
    expect(firstByteTimeoutMs(p, plain(1, 60_000, 4_000))).toBe(PLAIN_ANSWER_HEADROOM * 4_000);
    expect(firstByteTimeoutMs(p, plain(1, 600_000, 60_000))).toBe(30_000);
    // The floor and the deadline as for streams, but no share of the time left: the whole
    // generation comes before the first byte, and the deadline allows it.
    expect(firstByteTimeoutMs(policy({ latency_target_ms: 100 }), plain(1, 60_000, 10))).toBe(
      FIRST_BYTE_FLOOR_MS,
    );
    expect(firstByteTimeoutMs(p, plain(1, 9_000, 4_000))).toBe(8_000);
    expect(firstByteTimeoutMs(policy({ latency_target_ms: 30_000 }), plain(1, 3_000, 0))).toBe(
      3_000,
    );
    expect(firstByteTimeoutMs(p, plain(3, 400, 8_000))).toBe(400);
    // An estimate that is no number is none.
    expect(firstByteTimeoutMs(p, plain(1, 60_000, Number.NaN))).toBe(2_000);
    expect(firstByteTimeoutMs(p, plain(1, 60_000, Number.POSITIVE_INFINITY))).toBe(2_000);
  });

  it("a stream's limit ignores the estimate: its first event is its first token", () => {
    const p = policy({ latency_target_ms: 2_000 });
    expect(firstByteTimeoutMs(p, { ...stream(1, 60_000), expectedResponseMs: 20_000 })).toBe(2_000);
  });

  it("the policy's first_byte_timeout_ms overrides, for streams and plain answers", () => {
    const p = policy({ latency_target_ms: 2_000, first_byte_timeout_ms: 7_000 });
    expect(firstByteTimeoutMs(p, stream(1, 60_000))).toBe(7_000);
    expect(firstByteTimeoutMs(p, plain(1, 60_000, 20_000))).toBe(7_000);
    expect(firstByteTimeoutMs(p, stream(1, 5_000))).toBe(5_000);
  });
});
