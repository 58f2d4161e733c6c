import { describe, expect, it } from "vitest";
import { createWorkCounter, waitUntil } from "../src/index.ts";

describe("drain helpers", () => {
  it("counts work until it settles, also when it fails", async () => {
    const counter = createWorkCounter();
    let finish: () => void = () => {};
    const running = counter.run(() => new Promise<void>((r) => (finish = r)));
    const failing = counter.run(() => Promise.reject(new Error("boom")));
    expect(counter.count()).toBe(2);
    await expect(failing).rejects.toThrow("boom");
    expect(counter.count()).toBe(1);
    finish();
    await running;
    expect(counter.count()).toBe(0);
  });

  it("waits until the condition holds, and no longer than the deadline", async () => {
    let done = false;
    setTimeout(() => (done = true), 30);
    expect(await waitUntil(() => done, Date.now() + 5_000, Date.now, 5)).toBe(true);
    let clock = 0;
    expect(
      await waitUntil(
        () => false,
        100,
        () => (clock += 60),
        1,
      ),
    ).toBe(false);
  });
});
