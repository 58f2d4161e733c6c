import { describe, expect, it } from "vitest";
import { createLivenessTracker } from "../src/relay/dispatcher-liveness.ts";

const tracker = (lossAfterMs = 1_000) => {
  const lost: Array<[string, string]> = [];
  const t = createLivenessTracker({ lossAfterMs, onLost: (r, why) => lost.push([r, why]) });
  return { t, lost };
};

describe("dispatcher liveness tracker", () => {
  it("declares a replica lost once it is silent past the bound, and only once", () => {
    const { t, lost } = tracker();
    t.beat("d-1", 250, 0);
    t.beat("d-1", 250, 900);
    t.sweep(1_800);
    expect(lost).toEqual([]);
    t.sweep(1_901);
    expect(lost).toEqual([["d-1", "silent"]]);
    t.sweep(5_000);
    expect(lost).toHaveLength(1);
    expect(t.size()).toBe(0);
  });

  it("allows at least three beat intervals of a slow-beating replica", () => {
    const { t, lost } = tracker(1_000);
    t.beat("slow", 2_000, 0);
    t.sweep(5_999);
    expect(lost).toEqual([]);
    t.sweep(6_001);
    expect(lost).toEqual([["slow", "silent"]]);
  });

  it("counts an accept as a sign of life, also from a replica never heard before", () => {
    const { t, lost } = tracker();
    t.accepted("new", 100);
    t.sweep(1_000);
    expect(lost).toEqual([]);
    t.sweep(1_101);
    expect(lost).toEqual([["new", "silent"]]);
  });

  it("loses a leaving replica at once and tracks it afresh when heard again", () => {
    const { t, lost } = tracker();
    t.beat("d-2", 250, 0);
    t.left("d-2");
    expect(lost).toEqual([["d-2", "left"]]);
    t.beat("d-2", 250, 10);
    expect(t.size()).toBe(1);
  });

  it("keeps the others when one replica is lost", () => {
    const { t, lost } = tracker();
    t.beat("a", 250, 0);
    t.beat("b", 250, 0);
    t.beat("b", 250, 1_500);
    t.sweep(2_000);
    expect(lost).toEqual([["a", "silent"]]);
    expect(t.size()).toBe(1);
  });
});
