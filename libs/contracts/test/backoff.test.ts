import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { backoffDelayMs } from "../src/index.ts";

describe("backoffDelayMs", () => {
  it("doubles from the first pause and holds at the cap", () => {
    const backoff = { firstMs: 100, maxMs: 1_000 };
    const pauses = [1, 2, 3, 4, 5, 6, 7].map((failures) => backoffDelayMs(backoff, failures));
    expect(pauses).toEqual([100, 200, 400, 800, 1_000, 1_000, 1_000]);
  });

  it("grows by the factor it is given", () => {
    const backoff = { firstMs: 10, maxMs: 10_000, factor: 3 };
    expect([1, 2, 3, 4].map((n) => backoffDelayMs(backoff, n))).toEqual([10, 30, 90, 270]);
  });

  it("gives the first pause for a count below one", () => {
    expect(backoffDelayMs({ firstMs: 250, maxMs: 2_000 }, 0)).toBe(250);
    expect(backoffDelayMs({ firstMs: 250, maxMs: 2_000 }, -3)).toBe(250);
  });

  it("cuts a first pause above the cap to the cap", () => {
    expect(backoffDelayMs({ firstMs: 5_000, maxMs: 3_000 }, 1)).toBe(3_000);
  });

  it("is the cap, never Infinity or NaN, however many failures", () => {
    expect(backoffDelayMs({ firstMs: 100, maxMs: 1_000 }, 5_000)).toBe(1_000);
    expect(backoffDelayMs({ firstMs: 0, maxMs: 1_000 }, 5_000)).toBe(0);
    expect(backoffDelayMs({ firstMs: 100, maxMs: 1_000, factor: 1 }, 5_000)).toBe(100);
  });

  it("equals a pause doubled after each failure and capped each time", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.integer({ min: 1, max: 60 }),
        (firstMs, extraMs, failures) => {
          // The loops this replaced: a pause that starts at the first and is doubled, then
          // capped, after each failure (a first pause at most the cap, as theirs all were).
          const maxMs = firstMs + extraMs;
          let pause = firstMs;
          for (let n = 1; n < failures; n++) pause = Math.min(pause * 2, maxMs);
          expect(backoffDelayMs({ firstMs, maxMs }, failures)).toBe(pause);
        },
      ),
    );
  });

  it("refuses a negative pause, a shrinking factor and a count that is not a number", () => {
    expect(() => backoffDelayMs({ firstMs: -1, maxMs: 10 }, 1)).toThrow(RangeError);
    expect(() => backoffDelayMs({ firstMs: 1, maxMs: Number.NaN }, 1)).toThrow(RangeError);
    expect(() => backoffDelayMs({ firstMs: 1, maxMs: 10, factor: 0.5 }, 1)).toThrow(RangeError);
    expect(() => backoffDelayMs({ firstMs: 1, maxMs: 10 }, Number.NaN)).toThrow(RangeError);
  });
});
