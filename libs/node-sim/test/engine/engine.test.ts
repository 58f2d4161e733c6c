import { describe, expect, it } from "vitest";
import { createEngine, EngineCapacityError } from "../../src/engine/engine.ts";
import type { EngineObserver, EngineSettings } from "../../src/engine/engine.ts";
import { promptBlocks } from "../../src/engine/prompt-blocks.ts";
import { createManualClock } from "./manual-clock.ts";

const SETTINGS: EngineSettings = {
  kvCacheBlocks: 64,
  prefillTokensPerSecond: 1000,
  stepBaseMs: 10,
  stepPerSequenceMs: 1,
  maxRunning: 4,
};

/** A prompt of `tokens` tokens (4 characters each) made from `seed`. */
function prompt(seed: string, tokens: number) {
  return promptBlocks(seed.repeat(Math.ceil((tokens * 4) / seed.length)).slice(0, tokens * 4));
}

const quiet: EngineObserver = {
  scheduled() {},
  prefilled() {},
  stepped() {},
  finished() {},
};

function setup(settings: Partial<EngineSettings> = {}, observer = quiet) {
  const clock = createManualClock();
  const engine = createEngine({ ...SETTINGS, ...settings }, clock, observer);
  /** Submits a request now; `times[i]` is when token i+1 came out. */
  const send = (p: ReturnType<typeof prompt>, outputTokens: number) => {
    const times: number[] = [];
    const ticket = engine.submit({
      prompt: p,
      outputTokens,
      onTokens: (n) => {
        expect(n).toBe(times.length + 1);
        times.push(clock.now());
      },
    });
    return { times, ticket };
  };
  return { clock, engine, send };
}

describe("engine timing", () => {
  it("prefills the uncached tokens at the prefill rate, then decodes one token per step", () => {
    const { clock, send } = setup();
    const a = send(prompt("tenant-a ", 160), 3);
    clock.runAll();
    // 160 tokens at 1000/s, then two steps of 10 + 1 × 1 ms.
    expect(a.times).toEqual([160, 171, 182]);
    expect(a.ticket.cachedTokens).toBe(0);

    const b = send(prompt("tenant-a ", 160), 1);
    clock.runAll();
    // The same prompt: 9 blocks of 16 hit (the last token is always computed): 16 to prefill.
    expect(b.ticket.cachedTokens).toBe(144);
    expect(b.times).toEqual([182 + 16]);
  });

  it("runs one prefill at a time, first come first served: TTFT = queue + own prefill", () => {
    const { clock, send } = setup();
    const a = send(prompt("aaaa", 100), 1);
    const b = send(prompt("bbbb", 50), 1);
    const c = send(prompt("cccc", 10), 1);
    clock.runAll();
    expect(a.times).toEqual([100]);
    expect(b.times).toEqual([150]);
    expect(c.times).toEqual([160]);
  });

  it("makes a decode step longer as the batch grows, one token to every sequence per step", () => {
    const { clock, send } = setup({ prefillTokensPerSecond: 100_000 });
    // Prefills of 1 ms each.
    const a = send(prompt("aaaa", 100), 4);
    const b = send(prompt("bbbb", 100), 4);
    clock.runAll();
    // a's first step runs alone (11 ms); b joins the next one: 2 sequences, 12 ms a step.
    expect(a.times).toEqual([1, 12, 24, 36]);
    // b's last step runs alone again.
    expect(b.times).toEqual([2, 24, 36, 47]);
  });

  it("runs at most maxRunning sequences; the rest wait and start when one ends", () => {
    const { clock, engine, send } = setup({ maxRunning: 2, prefillTokensPerSecond: 100_000 });
    const a = send(prompt("aaaa", 100), 2);
    send(prompt("bbbb", 100), 5);
    const c = send(prompt("cccc", 100), 1);
    expect(engine.counters()).toMatchObject({ running: 2, waiting: 1 });
    clock.runAll();
    // a decodes alone first (b is still in prefill): c is scheduled when a ends, at 12.
    expect(a.times).toEqual([1, 12]);
    expect(c.times).toEqual([13]);
    expect(engine.counters()).toMatchObject({ running: 0, waiting: 0 });
  });

  it("lays work end to end on its own timeline, so late timers do not slow it down", () => {
    const ttfts: number[] = [];
    const { clock, send } = setup({}, { ...quiet, prefilled: (e) => ttfts.push(e.ttftS) });
    const a = send(prompt("aaaa", 100), 1);
    const b = send(prompt("bbbb", 100), 1);
    // No timer runs until 500 ms (an event loop that stalled); then both catch up at once,
    // and b's prefill counts from when a's was due to end, not from when its timer fired.
    clock.advanceLateTo(500);
    expect(a.times).toEqual([500]);
    expect(b.times).toEqual([500]);
    expect(ttfts).toEqual([0.1, 0.2]);
  });
});

describe("engine cache", () => {
  it("counts prefix-cache queries and hits in tokens, and whole prompts at their first token", () => {
    const { clock, engine, send } = setup();
    send(prompt("shared system prompt ", 320), 1);
    clock.runAll();
    send(prompt("shared system prompt ", 320), 1);
    send(prompt("other", 33), 1);
    clock.runAll();
    expect(engine.counters()).toMatchObject({
      prefixCacheQueries: 320 + 320 + 33,
      prefixCacheHits: 304,
      promptTokens: 673,
      generationTokens: 3,
    });
  });

  it("misses when two requests of one prefix are scheduled before the first prefill ends", () => {
    const { clock, send } = setup();
    const a = send(prompt("xyzw", 160), 1);
    const b = send(prompt("xyzw", 160), 1);
    clock.runAll();
    expect(a.ticket.cachedTokens).toBe(0);
    expect(b.ticket.cachedTokens).toBe(0);
    expect(b.times).toEqual([320]);
  });

  it("evicts least recently used prefixes when the cache is full", () => {
    // 30 blocks: two 320-token prompts (20 blocks each, 21 with their output) cannot both stay.
    const { clock, engine, send } = setup({ kvCacheBlocks: 30 });
    send(prompt("tenant-a ", 320), 1);
    clock.runAll();
    send(prompt("tenant-b ", 320), 1);
    clock.runAll();
    const again = send(prompt("tenant-a ", 320), 1);
    clock.runAll();
    // b took 21 blocks: 10 were free, 11 came from a's tail (its head stayed): 9 blocks hit.
    expect(again.ticket.cachedTokens).toBe(144);
    const bAgain = send(prompt("tenant-b ", 320), 1);
    clock.runAll();
    // a's second run took the 12 blocks it lacked from b's tail in turn.
    expect(bAgain.ticket.cachedTokens).toBe(144);
    expect(engine.counters().cachedBlocks).toBeLessThanOrEqual(30);
  });

  it("keeps blocks of running sequences: a request waits for room rather than evicting them", () => {
    const { clock, engine, send } = setup({ kvCacheBlocks: 30, prefillTokensPerSecond: 1e6 });
    // 22 blocks (300 prompt and 50 output tokens) held while it decodes for a long time.
    const long = send(prompt("long", 300), 50);
    const short = send(prompt("shrt", 300), 1);
    expect(engine.counters()).toMatchObject({ running: 1, waiting: 1 });
    expect(engine.counters().kvCacheUsage).toBeCloseTo(22 / 30);
    clock.runAll();
    expect(long.times).toHaveLength(50);
    // It could start only once the long one ended and freed its blocks.
    expect(short.times[0]).toBeGreaterThan(long.times[49]!);
    expect(engine.counters().kvCacheUsage).toBe(0);
  });

  it("refuses a request that could never fit the cache", () => {
    const { engine } = setup({ kvCacheBlocks: 10 });
    expect(() =>
      engine.submit({ prompt: prompt("big", 200), outputTokens: 1, onTokens() {} }),
    ).toThrow(EngineCapacityError);
  });

  it("frees a cancelled sequence's slot and blocks, and drops a prefill it had not finished", () => {
    const { clock, engine, send } = setup({ maxRunning: 1 });
    const a = send(prompt("aaaa", 160), 1);
    const b = send(prompt("aaaa", 160), 1);
    clock.advanceTo(50);
    a.ticket.cancel();
    expect(engine.counters()).toMatchObject({ running: 1, waiting: 0, cachedBlocks: 0 });
    clock.runAll();
    expect(a.times).toEqual([]);
    // b found nothing cached (a's prefill never finished) and started when a left.
    expect(b.ticket.cachedTokens).toBe(0);
    expect(b.times).toEqual([210]);
  });

  it("reset evicts the cache: the next request of a cached prompt misses", () => {
    const { clock, engine, send } = setup();
    send(prompt("aaaa", 160), 1);
    clock.runAll();
    engine.resetPrefixCache();
    const again = send(prompt("aaaa", 160), 1);
    clock.runAll();
    expect(again.ticket.cachedTokens).toBe(0);
  });

  it("reports each phase to its observer", () => {
    const events: string[] = [];
    const { clock, send } = setup(
      {},
      {
        scheduled: (e) => events.push(`scheduled q=${e.queueS} hit=${e.cachedTokens}`),
        prefilled: (e) => events.push(`prefilled ttft=${e.ttftS} prefill=${e.prefillS}`),
        stepped: (e) => events.push(`stepped ${e.sequences}`),
        finished: (e) => events.push(`finished decode=${e.decodeS} n=${e.generated}`),
      },
    );
    send(prompt("aaaa", 100), 2);
    send(prompt("bbbb", 100), 1);
    clock.runAll();
    expect(events).toEqual([
      "scheduled q=0 hit=0",
      "scheduled q=0 hit=0",
      "prefilled ttft=0.1 prefill=0.1",
      "finished decode=0.011 n=2",
      "stepped 1",
      "prefilled ttft=0.2 prefill=0.1",
      "finished decode=0 n=1",
    ]);
  });
});

describe("prompt blocks", () => {
  it("hashes full blocks of 64 characters as a chain: a changed block changes every later hash", () => {
    const base = "x".repeat(64 * 3 + 10);
    const changed = `${"x".repeat(64)}y${"x".repeat(64 * 2 + 9)}`;
    const a = promptBlocks(base);
    const b = promptBlocks(changed);
    expect(a.tokens).toBe(Math.ceil((64 * 3 + 10) / 4));
    expect(a.hashes).toHaveLength(3);
    expect(b.hashes[0]).toBe(a.hashes[0]);
    expect(b.hashes[1]).not.toBe(a.hashes[1]);
    expect(b.hashes[2]).not.toBe(a.hashes[2]);
    // The third block's text is the same in both; only its prefix differs.
    expect(base.slice(128, 192)).toBe(changed.slice(128, 192));
  });
});
