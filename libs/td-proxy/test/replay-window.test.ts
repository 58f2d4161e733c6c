import { describe, expect, it } from "vitest";
import { ReplayWindow } from "../src/replay-window.ts";

describe("replay window", () => {
  it("takes each number once, in any order inside the window", () => {
    const w = new ReplayWindow(8);
    expect([5, 3, 5, 4, 3, 12, 6, 5, 4].map((n) => w.take(n))).toEqual([
      true,
      true,
      false,
      true,
      false,
      true,
      true,
      false,
      false,
    ]);
  });

  it("refuses a number that fell out of the window, even if never used", () => {
    const w = new ReplayWindow(8);
    expect(w.take(20)).toBe(true);
    expect(w.take(12)).toBe(false);
    expect(w.take(13)).toBe(true);
  });

  it("gives back a number whose request did not open", () => {
    const w = new ReplayWindow(8);
    expect(w.take(1)).toBe(true);
    expect(w.take(1)).toBe(false);
    w.release(1);
    expect(w.take(1)).toBe(true);
  });

  it("clears the slots it moves past, however far it jumps", () => {
    const w = new ReplayWindow(4);
    for (const n of [0, 1, 2, 3]) expect(w.take(n)).toBe(true);
    expect(w.take(100)).toBe(true);
    expect([97, 98, 99].map((n) => w.take(n))).toEqual([true, true, true]);
    expect(w.take(96)).toBe(false);
  });
});
