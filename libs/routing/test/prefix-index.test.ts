import { describe, expect, it } from "vitest";
import { PrefixIndex, PREFIX_BLOCK_CHARS, CHARS_PER_TOKEN } from "../src/index.ts";

const BLOCK_TOKENS = PREFIX_BLOCK_CHARS / CHARS_PER_TOKEN;
/** A prompt's digests: `blocks` blocks of tenant `t` (digests t*1000 + block). */
const prompt = (t: number, blocks: number) =>
  Float64Array.from({ length: blocks }, (_, b) => t * 1000 + b);

describe("prefix index", () => {
  it("matches each node to the deepest block it holds", () => {
    const index = new PrefixIndex(3, 1_000_000);
    index.record("a", 0, prompt(1, 10));
    index.record("b", 1, prompt(1, 4));
    const m = index.match(prompt(1, 12));
    expect(Array.from(m.blocks)).toEqual([10, 4, 0]);
    expect(m.best).toBe(10);
    index.clearMatch();
    expect(Array.from(index.match(prompt(2, 5)).blocks)).toEqual([0, 0, 0]);
    index.clearMatch();
  });

  it("keeps at most the node's cache size in blocks, evicting the least recently sent", () => {
    const index = new PrefixIndex(1, 10 * BLOCK_TOKENS);
    index.record("a", 0, prompt(1, 6));
    index.record("a", 0, prompt(2, 6));
    expect(index.sizeOf("a")).toEqual({ blocks: 10, limit: 10 });
    // Tenant 1 went first, and its tail goes before its head (as engines evict).
    const m1 = index.match(prompt(1, 6));
    expect(m1.blocks[0]).toBe(4);
    index.clearMatch();
    expect(index.match(prompt(2, 6)).blocks[0]).toBe(6);
    index.clearMatch();
    // Sending tenant 1 again makes it the most recent: now tenant 2 loses blocks.
    index.record("a", 0, prompt(1, 6));
    expect(index.match(prompt(2, 6)).blocks[0]).toBe(4);
    index.clearMatch();
  });

  it("shrinks to a smaller reported capacity at once", () => {
    const index = new PrefixIndex(1, 100 * BLOCK_TOKENS);
    index.record("a", 0, prompt(1, 40));
    index.setCapacity("a", 0, 8 * BLOCK_TOKENS);
    expect(index.sizeOf("a")).toEqual({ blocks: 8, limit: 8 });
    index.setCapacity("a", 0, null);
    expect(index.sizeOf("a").limit).toBe(100);
  });

  it("forgets a node entirely, and only that node", () => {
    const index = new PrefixIndex(2, 1_000_000);
    index.record("a", 0, prompt(1, 5));
    index.record("b", 1, prompt(1, 5));
    index.forget("a");
    expect(Array.from(index.match(prompt(1, 5)).blocks)).toEqual([0, 5]);
    index.clearMatch();
  });

  it("halves a node's share when its hit rate falls well short of the expected, and earns it back", () => {
    const index = new PrefixIndex(1, 64 * BLOCK_TOKENS);
    const sent = (expectedBlocks: number) =>
      index.record("a", 0, prompt(1, 20), {
        expectedBlocks,
        promptChars: 20 * PREFIX_BLOCK_CHARS,
      });
    sent(18);
    sent(18);
    index.observeHitRate("a", 0.1); // expected 0.9
    expect(index.sizeOf("a").limit).toBe(32);
    // Too small a sample changes nothing.
    index.observeHitRate("a", 0.0);
    expect(index.sizeOf("a").limit).toBe(32);
    sent(18);
    index.observeHitRate("a", 0.5); // between the bounds: keep
    expect(index.sizeOf("a").limit).toBe(32);
    sent(18);
    index.observeHitRate("a", 0.85);
    expect(index.sizeOf("a").limit).toBe(64);
  });

  it("never corrects on a low expectation (a cold node is expected to miss)", () => {
    const index = new PrefixIndex(1, 64 * BLOCK_TOKENS);
    index.record("a", 0, prompt(1, 20), {
      expectedBlocks: 0,
      promptChars: 20 * PREFIX_BLOCK_CHARS,
    });
    index.observeHitRate("a", 0);
    expect(index.sizeOf("a").limit).toBe(64);
  });

  it("follows a rebind: moved nodes keep their blocks, removed ones are dropped", () => {
    const index = new PrefixIndex(2, 1_000_000);
    index.record("a", 0, prompt(1, 5));
    index.record("b", 1, prompt(2, 5));
    index.rebind(
      new Map([
        ["b", 0],
        ["c", 1],
      ]),
    );
    expect(Array.from(index.match(prompt(2, 5)).blocks)).toEqual([5, 0]);
    index.clearMatch();
    expect(index.match(prompt(1, 5)).best).toBe(0);
    index.clearMatch();
    expect(index.sizeOf("a").blocks).toBe(0);
  });
});
