import { describe, expect, it } from "vitest";
import { createBlockCache } from "../../src/engine/block-cache.ts";

/** A sequence that computed `hashes` and finished: its blocks are cached and evictable. */
function cacheAndFree(cache: ReturnType<typeof createBlockCache>, hashes: string[]): void {
  expect(cache.allocate([], hashes.length)).toBe(true);
  cache.publish(hashes);
  cache.release(hashes, 0);
}

describe("block cache", () => {
  it("finds the cached blocks of a prefix, from the first, stopping at the first miss", () => {
    const cache = createBlockCache(8);
    cacheAndFree(cache, ["a1", "a2", "a3"]);
    expect(cache.matchPrefix(["a1", "a2", "a3", "a4"], 10)).toBe(3);
    expect(cache.matchPrefix(["a1", "x", "a3"], 10)).toBe(1);
    expect(cache.matchPrefix(["x", "a2"], 10)).toBe(0);
    expect(cache.matchPrefix(["a1", "a2", "a3"], 2)).toBe(2);
    // Freed blocks stay cached but are not in use.
    expect(cache.cached).toBe(3);
    expect(cache.inUse).toBe(0);
  });

  it("evicts the least recently freed block first, a prefix's tail before its head", () => {
    const cache = createBlockCache(4);
    cacheAndFree(cache, ["a1", "a2"]);
    cacheAndFree(cache, ["b1", "b2"]);
    // One block needed: a2 goes (a's blocks were freed first, and a2 before a1).
    expect(cache.allocate([], 1)).toBe(true);
    expect(cache.matchPrefix(["a1", "a2"], 9)).toBe(1);
    expect(cache.matchPrefix(["b1", "b2"], 9)).toBe(2);
    cache.release([], 1);
    // Using b again makes it the most recently freed: a1 is evicted next, then b's tail.
    expect(cache.allocate(["b1", "b2"], 0)).toBe(true);
    cache.release(["b1", "b2"], 0);
    expect(cache.allocate([], 3)).toBe(true);
    expect(cache.matchPrefix(["a1"], 9)).toBe(0);
    expect(cache.matchPrefix(["b1", "b2"], 9)).toBe(1);
    expect(cache.cached).toBe(1);
    expect(cache.inUse).toBe(3);
  });

  it("never evicts blocks that running sequences hold, and refuses what does not fit", () => {
    const cache = createBlockCache(4);
    expect(cache.allocate([], 3)).toBe(true);
    cache.publish(["a1", "a2", "a3"]);
    // a1..a3 are held: one block is left.
    expect(cache.allocate([], 2)).toBe(false);
    expect(cache.inUse).toBe(3);
    expect(cache.matchPrefix(["a1", "a2", "a3"], 9)).toBe(3);
    expect(cache.allocate(["a1", "a2"], 1)).toBe(true);
    expect(cache.inUse).toBe(4);
    expect(cache.allocate([], 1)).toBe(false);
    // The first sequence ends; the second still holds a1 and a2, so only a3 can go.
    cache.release(["a1", "a2", "a3"], 0);
    expect(cache.inUse).toBe(3);
    expect(cache.allocate([], 1)).toBe(true);
    expect(cache.matchPrefix(["a1", "a2", "a3"], 9)).toBe(2);
  });

  it("counts blocks about to be held as no longer evictable when checking room", () => {
    const cache = createBlockCache(3);
    cacheAndFree(cache, ["a1", "a2", "a3"]);
    // Holding all three leaves nothing to evict for a fourth block.
    expect(cache.allocate(["a1", "a2", "a3"], 1)).toBe(false);
    expect(cache.inUse).toBe(0);
    expect(cache.allocate(["a1", "a2"], 1)).toBe(true);
    expect(cache.matchPrefix(["a1", "a2", "a3"], 9)).toBe(2);
  });

  it("shares a block two sequences computed at once instead of caching it twice", () => {
    const cache = createBlockCache(4);
    expect(cache.allocate([], 2)).toBe(true);
    expect(cache.allocate([], 2)).toBe(true);
    expect(cache.publish(["a1", "a2"])).toBe(2);
    expect(cache.publish(["a1", "a2"])).toBe(0);
    expect(cache.cached).toBe(2);
    expect(cache.inUse).toBe(2);
    cache.release(["a1", "a2"], 0);
    expect(cache.inUse).toBe(2);
    cache.release(["a1", "a2"], 0);
    expect(cache.inUse).toBe(0);
    expect(cache.allocate([], 2)).toBe(true);
  });

  it("reset evicts every cached block no sequence holds", () => {
    const cache = createBlockCache(6);
    cacheAndFree(cache, ["a1", "a2"]);
    expect(cache.allocate([], 1)).toBe(true);
    cache.publish(["b1"]);
    cache.evictAll();
    expect(cache.matchPrefix(["a1"], 9)).toBe(0);
    expect(cache.matchPrefix(["b1"], 9)).toBe(1);
    expect(cache.cached).toBe(1);
  });
});
