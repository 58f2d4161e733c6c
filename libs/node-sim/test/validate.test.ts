import { describe, expect, it } from "vitest";
import {
  parseSimConfigPatch,
  parseSimFault,
  SIM_FAULT_KINDS,
  SimInputError,
} from "../src/index.ts";

describe("parseSimFault", () => {
  it("accepts every documented fault and keeps only its fields", () => {
    expect(parseSimFault({ kind: "status", status: 503, retryAfterS: 2, times: 1 })).toEqual({
      kind: "status",
      status: 503,
      retryAfterS: 2,
      times: 1,
    });
    expect(parseSimFault({ kind: "reset" })).toEqual({ kind: "reset" });
    expect(parseSimFault({ kind: "hang", times: 3 })).toEqual({ kind: "hang", times: 3 });
    expect(parseSimFault({ kind: "slow_first_token", delayMs: 12.5 })).toEqual({
      kind: "slow_first_token",
      delayMs: 12.5,
    });
    for (const kind of ["cut_stream", "stall_stream", "malformed_chunk"] as const) {
      expect(parseSimFault({ kind, afterChunks: 0 })).toEqual({ kind, afterChunks: 0 });
    }
    expect(parseSimFault({ kind: "health_fail" })).toEqual({ kind: "health_fail" });
    expect(parseSimFault({ kind: "relay", target: "https://127.0.0.1:1", times: 2 })).toEqual({
      kind: "relay",
      target: "https://127.0.0.1:1",
      times: 2,
    });
    expect(parseSimFault({ kind: "key_swap" })).toEqual({ kind: "key_swap" });
    expect(() => parseSimFault({ kind: "key_swap", times: 1 })).toThrow(/fault.times/);
    expect(() => parseSimFault({ kind: "relay", target: "nope" })).toThrow(/fault.target/);
    expect(SIM_FAULT_KINDS).toHaveLength(10);
  });

  it("rejects bad input with the offending field", () => {
    const cases: [unknown, string][] = [
      [undefined, "fault"],
      ["status", "fault"],
      [{}, "fault.kind"],
      [{ kind: "status", status: 600 }, "fault.status"],
      [{ kind: "status", status: 503.5 }, "fault.status"],
      [{ kind: "status", status: 503, retryAfterS: 1.5 }, "fault.retryAfterS"],
      [{ kind: "stall_stream", afterChunks: -1 }, "fault.afterChunks"],
      [{ kind: "slow_first_token", delayMs: Infinity }, "fault.delayMs"],
      [{ kind: "slow_first_token" }, "fault.delayMs"],
      [{ kind: "health_fail", times: 1.5 }, "fault.times"],
      [{ kind: "reset", status: 500 }, "fault.status"],
    ];
    for (const [input, field] of cases) {
      let caught: unknown;
      try {
        parseSimFault(input);
      } catch (error) {
        caught = error;
      }
      expect(caught, JSON.stringify(input)).toBeInstanceOf(SimInputError);
      expect((caught as SimInputError).field).toBe(field);
      expect((caught as SimInputError).code).toBe("invalid_fault");
    }
  });
});

describe("parseSimConfigPatch", () => {
  it("accepts partial patches and rejects unknown or out-of-range fields", () => {
    expect(parseSimConfigPatch({})).toEqual({});
    expect(parseSimConfigPatch({ tokensPerSecond: 0, ttftMs: 5 })).toEqual({
      tokensPerSecond: 0,
      ttftMs: 5,
    });
    expect(() => parseSimConfigPatch({ maxConcurrency: 2.5 })).toThrow(/maxConcurrency/);
    expect(() => parseSimConfigPatch({ completionTokens: 0 })).toThrow(/completionTokens/);
    expect(() => parseSimConfigPatch({ ttft: 1 })).toThrow(/unknown field/);
    expect(() => parseSimConfigPatch(null)).toThrow(SimInputError);
  });
});
