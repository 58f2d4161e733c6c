import { describe, expect, it } from "vitest";
import { startWhenPossible } from "../src/index.ts";

const noSleep = () => Promise.resolve();

describe("startWhenPossible", () => {
  it("retries a failing start with doubling, capped pauses until it succeeds", async () => {
    const warnings: object[] = [];
    const pauses: number[] = [];
    let calls = 0;
    const result = await startWhenPossible(
      () => {
        calls += 1;
        return calls < 5 ? Promise.reject(new Error(`timeout ${calls}`)) : Promise.resolve("up");
      },
      {
        what: "dispatcher",
        log: { warn: (obj) => warnings.push(obj) },
        firstDelayMs: 100,
        maxDelayMs: 300,
        sleep: (ms) => {
          pauses.push(ms);
          return Promise.resolve();
        },
      },
    );
    expect(result).toBe("up");
    expect(calls).toBe(5);
    expect(pauses).toEqual([100, 200, 300, 300]);
    expect(warnings[0]).toEqual({ err: "timeout 1", attempt: 1, retry_in_ms: 100 });
    expect(warnings).toHaveLength(4);
  });

  it("throws a permanent error at once", async () => {
    let calls = 0;
    const bad = new Error("bad config");
    await expect(
      startWhenPossible(
        () => {
          calls += 1;
          return Promise.reject(bad);
        },
        { what: "x", log: { warn() {} }, isPermanent: (e) => e === bad, sleep: noSleep },
      ),
    ).rejects.toBe(bad);
    expect(calls).toBe(1);
  });

  it("stops retrying when its signal aborts", async () => {
    const controller = new AbortController();
    let calls = 0;
    const attempt = startWhenPossible(
      () => {
        calls += 1;
        if (calls === 2) controller.abort(new Error("shutting down"));
        return Promise.reject(new Error("down"));
      },
      { what: "x", log: { warn() {} }, firstDelayMs: 1, signal: controller.signal },
    );
    await expect(attempt).rejects.toThrow(/down|shutting down/);
    expect(calls).toBe(2);
  });
});
