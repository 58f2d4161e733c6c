import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { healthScore } from "../src/index.ts";

const anyNumber = fc.oneof(fc.double(), fc.constantFrom(Number.NaN, Infinity, -Infinity, 0, -0));
const rate = fc.double({ min: 0, max: 1, noNaN: true });
const depth = fc.double({ min: 0, max: 1e6, noNaN: true });
const capacity = fc.double({ min: 1e-3, max: 1e4, noNaN: true });

describe("healthScore", () => {
  it("anchors: idle and clean is 100, full is 50, all failing is 0", () => {
    expect(healthScore({ queueDepth: 0, errorRate: 0, maxConcurrency: 16 })).toBe(100);
    expect(healthScore({ queueDepth: 16, errorRate: 0, maxConcurrency: 16 })).toBe(50);
    expect(healthScore({ queueDepth: 16, errorRate: 0.5, maxConcurrency: 16 })).toBe(25);
    expect(healthScore({ queueDepth: 0, errorRate: 1, maxConcurrency: 16 })).toBe(0);
  });

  it("stays within [0, 100] for any input, including NaN and infinities", () => {
    fc.assert(
      fc.property(anyNumber, anyNumber, anyNumber, (queueDepth, errorRate, maxConcurrency) => {
        const score = healthScore({ queueDepth, errorRate, maxConcurrency });
        expect(score).toBeGreaterThanOrEqual(0);
        expect(score).toBeLessThanOrEqual(100);
      }),
    );
  });

  it("never rises when the error rate rises", () => {
    fc.assert(
      fc.property(rate, rate, depth, capacity, (a, b, queueDepth, maxConcurrency) => {
        const [low, high] = a <= b ? [a, b] : [b, a];
        expect(healthScore({ queueDepth, errorRate: high, maxConcurrency })).toBeLessThanOrEqual(
          healthScore({ queueDepth, errorRate: low, maxConcurrency }),
        );
      }),
    );
  });

  it("never rises when the queue grows", () => {
    fc.assert(
      fc.property(depth, depth, rate, capacity, (a, b, errorRate, maxConcurrency) => {
        const [short, long] = a <= b ? [a, b] : [b, a];
        expect(healthScore({ queueDepth: long, errorRate, maxConcurrency })).toBeLessThanOrEqual(
          healthScore({ queueDepth: short, errorRate, maxConcurrency }),
        );
      }),
    );
  });

  it("strictly prefers a less loaded node when both are healthy", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 1, max: 100 }),
        fc.integer({ min: 1, max: 1024 }),
        (queueDepth, extra, maxConcurrency) => {
          expect(
            healthScore({ queueDepth: queueDepth + extra, errorRate: 0, maxConcurrency }),
          ).toBeLessThan(healthScore({ queueDepth, errorRate: 0, maxConcurrency }));
        },
      ),
    );
  });
});
