import { createBlockCache } from "./block-cache.ts";
import type { BlockCache } from "./block-cache.ts";
import { BLOCK_TOKENS } from "./prompt-blocks.ts";
import type { PromptBlocks } from "./prompt-blocks.ts";

/**
 * Time as the engine reads it: milliseconds from any origin, and one-shot timers. The node
 * passes the real clock; tests pass a manual one, which makes every run exact.
 */
export interface EngineClock {
  now(): number;
  /** Runs `fn` at `at` (or at once when `at` has passed); returns a cancel function. */
  at(at: number, fn: () => void): () => void;
}

/** The engine model's settings (README, "Engine model"). */
export interface EngineSettings {
  /** KV-cache blocks of {@link BLOCK_TOKENS} tokens. */
  kvCacheBlocks: number;
  /** Prompt tokens prefilled per second; one prefill at a time. */
  prefillTokensPerSecond: number;
  /** One decode step, whatever the batch, in milliseconds. */
  stepBaseMs: number;
  /** What each running sequence adds to a decode step, in milliseconds. */
  stepPerSequenceMs: number;
  /** Sequences running at once (vLLM's `max_num_seqs`); the others wait. */
  maxRunning: number;
}

/** What the engine reports as it goes, for the node's vLLM metrics. Seconds throughout. */
export interface EngineObserver {
  /** A sequence was scheduled: its prompt looked up in the cache. */
  scheduled(event: { queueS: number; promptTokens: number; cachedTokens: number }): void;
  /** Its prefill ended and its first token came out. */
  prefilled(event: { ttftS: number; prefillS: number; promptTokens: number }): void;
  /** A decode step gave one token to each of `sequences` sequences after `stepS`. */
  stepped(event: { stepS: number; sequences: number }): void;
  /** A sequence produced its last token. */
  finished(event: { decodeS: number; inferenceS: number; generated: number }): void;
}

/** One request for the engine. */
export interface EngineRequest {
  prompt: PromptBlocks;
  /** Tokens to generate, at least 1. */
  outputTokens: number;
  /** Called after each token with the count generated so far (the last call: `outputTokens`). */
  onTokens(generated: number): void;
}

/** A request in the engine; `cancel` frees its place or its blocks (a client gone). */
export interface EngineTicket {
  /** Prompt tokens found in the cache when it was scheduled; undefined until then. */
  readonly cachedTokens: number | undefined;
  cancel(): void;
}

/** Cumulative counts, as vLLM's counters report them, and point-in-time state. */
export interface EngineCounters {
  running: number;
  waiting: number;
  /** Blocks held by running sequences ÷ all blocks. */
  kvCacheUsage: number;
  cachedBlocks: number;
  /** Prompt tokens looked up in the prefix cache (vLLM: `prefix_cache_queries`). */
  prefixCacheQueries: number;
  /** Of those, tokens found cached (vLLM: `prefix_cache_hits`). */
  prefixCacheHits: number;
  /** Whole prompts, cached tokens included, counted at their first token (vLLM). */
  promptTokens: number;
  generationTokens: number;
}

export interface Engine {
  readonly settings: Readonly<EngineSettings>;
  /**
   * Queues a request. Throws {@link EngineCapacityError} when its prompt and output could
   * never fit the KV cache, as vLLM refuses a request longer than its cache.
   */
  submit(request: EngineRequest): EngineTicket;
  counters(): EngineCounters;
  /** Changes `maxRunning`; raising it schedules waiting sequences at once. */
  setMaxRunning(maxRunning: number): void;
  /** Evicts every cached block no running sequence holds. */
  resetPrefixCache(): void;
}

/** A request that needs more KV-cache blocks than the engine has. */
export class EngineCapacityError extends Error {
  readonly code = "kv_cache_too_small";
  readonly blocksNeeded: number;
  readonly capacity: number;
  constructor(blocksNeeded: number, capacity: number) {
    super(
      `the request needs ${blocksNeeded} KV-cache blocks of ${BLOCK_TOKENS} tokens; ` +
        `this engine has ${capacity}`,
    );
    this.name = "EngineCapacityError";
    this.blocksNeeded = blocksNeeded;
    this.capacity = capacity;
  }
}

type Phase = "waiting" | "prefill-queued" | "prefilling" | "decoding" | "done";

interface Sequence {
  request: EngineRequest;
  phase: Phase;
  arrivedAt: number;
  scheduledAt: number;
  firstTokenAt: number;
  /** Blocks it needs: prompt and output, rounded up. */
  blocks: number;
  /** Cached prompt blocks it holds (hits, then the ones it published after prefill). */
  held: string[];
  /** Private blocks it holds. */
  fresh: number;
  cachedTokens: number | undefined;
  generated: number;
  cancelPrefill: (() => void) | undefined;
}

/**
 * A simulated vLLM engine: automatic prefix caching over blocks of the prompt, an LRU of
 * cached blocks, one prefill at a time whose length is the uncached tokens ÷ the prefill
 * rate, and decode in steps for all running sequences together. See the README, "Engine
 * model", for what it leaves out.
 *
 * Work is laid end to end on the engine's own timeline (a step starts when the last one was
 * due to end, not when its timer fired), so a late timer delays what a client sees but never
 * slows the simulated GPU down.
 */
export function createEngine(
  settings: EngineSettings,
  clock: EngineClock,
  observer: EngineObserver,
): Engine {
  checkSettings(settings);
  const config = { ...settings };
  const cache: BlockCache = createBlockCache(config.kvCacheBlocks);
  const waiting: Sequence[] = [];
  const prefillQueue: Sequence[] = [];
  const decoding = new Set<Sequence>();
  let running = 0;
  let prefilling: Sequence | undefined;
  /** When the prefill unit and the decode loop are next free, on the engine's timeline. */
  let prefillFreeAt = -Infinity;
  let stepFreeAt = -Infinity;
  let stepTimer: (() => void) | undefined;
  const totals = {
    prefixCacheQueries: 0,
    prefixCacheHits: 0,
    promptTokens: 0,
    generationTokens: 0,
  };

  /**
   * Schedules waiting sequences, first come first served, while slots and blocks allow. `t`:
   * when the event that may let them in happened, on the engine's timeline.
   */
  function schedule(t: number): void {
    while (waiting.length > 0 && running < config.maxRunning) {
      const seq = waiting[0]!;
      const { hashes, tokens } = seq.request.prompt;
      // As vLLM: at least the last prompt token is computed, so a hit stops one token short.
      const hitLimit = Math.floor((tokens - 1) / BLOCK_TOKENS);
      const hits = cache.matchPrefix(hashes, hitLimit);
      const held = hashes.slice(0, hits);
      if (!cache.allocate(held, seq.blocks - hits)) return;
      waiting.shift();
      running += 1;
      seq.held = held;
      seq.fresh = seq.blocks - hits;
      seq.cachedTokens = hits * BLOCK_TOKENS;
      seq.scheduledAt = Math.max(t, seq.arrivedAt);
      seq.phase = "prefill-queued";
      totals.prefixCacheQueries += tokens;
      totals.prefixCacheHits += seq.cachedTokens;
      observer.scheduled({
        queueS: (seq.scheduledAt - seq.arrivedAt) / 1000,
        promptTokens: tokens,
        cachedTokens: seq.cachedTokens,
      });
      prefillQueue.push(seq);
    }
  }

  /** Starts the next queued prefill if the prefill unit is free; `t` as in {@link schedule}. */
  function startPrefill(t: number): void {
    if (prefilling !== undefined) return;
    const seq = prefillQueue.shift();
    if (seq === undefined) return;
    prefilling = seq;
    seq.phase = "prefilling";
    const startedAt = Math.max(t, seq.scheduledAt, prefillFreeAt);
    const uncached = seq.request.prompt.tokens - (seq.cachedTokens ?? 0);
    const endsAt = startedAt + (uncached * 1000) / config.prefillTokensPerSecond;
    prefillFreeAt = endsAt;
    seq.cancelPrefill = clock.at(endsAt, () => {
      seq.cancelPrefill = undefined;
      prefilling = undefined;
      endPrefill(seq, startedAt, endsAt);
      startPrefill(endsAt);
    });
  }

  function endPrefill(seq: Sequence, startedAt: number, endedAt: number): void {
    const { hashes, tokens } = seq.request.prompt;
    // The prompt's full blocks computed now become cached, for the next prompts to find.
    const computed = hashes.slice(seq.held.length);
    cache.publish(computed);
    seq.fresh -= computed.length;
    seq.held = hashes.slice();
    seq.firstTokenAt = endedAt;
    totals.promptTokens += tokens;
    observer.prefilled({
      ttftS: (endedAt - seq.arrivedAt) / 1000,
      prefillS: (endedAt - startedAt) / 1000,
      promptTokens: tokens,
    });
    emit(seq, 1, endedAt);
    if (seq.phase === "done") return;
    seq.phase = "decoding";
    decoding.add(seq);
    startStep(endedAt);
  }

  /** Starts a decode step for every decoding sequence unless one is under way. */
  function startStep(t: number): void {
    if (stepTimer !== undefined || decoding.size === 0) return;
    const batch = [...decoding];
    const startedAt = Math.max(t, stepFreeAt);
    const stepMs = config.stepBaseMs + config.stepPerSequenceMs * batch.length;
    const endsAt = startedAt + stepMs;
    stepFreeAt = endsAt;
    stepTimer = clock.at(endsAt, () => {
      stepTimer = undefined;
      let sequences = 0;
      for (const seq of batch) {
        if (seq.phase !== "decoding") continue;
        sequences += 1;
        emit(seq, seq.generated + 1, endsAt);
      }
      if (sequences > 0) observer.stepped({ stepS: stepMs / 1000, sequences });
      startStep(endsAt);
    });
  }

  /** `seq` has `generated` tokens at `t`; the last one ends it. */
  function emit(seq: Sequence, generated: number, t: number): void {
    totals.generationTokens += generated - seq.generated;
    seq.generated = generated;
    if (generated >= seq.request.outputTokens) {
      observer.finished({
        decodeS: (t - seq.firstTokenAt) / 1000,
        inferenceS: (t - seq.scheduledAt) / 1000,
        generated,
      });
      finish(seq, t);
    }
    seq.request.onTokens(generated);
  }

  /** Frees what `seq` holds and schedules the sequences its blocks and slot were holding up. */
  function finish(seq: Sequence, t: number): void {
    const wasRunning = seq.phase !== "waiting" && seq.phase !== "done";
    seq.phase = "done";
    decoding.delete(seq);
    if (wasRunning) {
      running -= 1;
      cache.release(seq.held, seq.fresh);
      seq.held = [];
      seq.fresh = 0;
    }
    schedule(t);
    startPrefill(t);
  }

  function cancel(seq: Sequence): void {
    switch (seq.phase) {
      case "done":
        return;
      case "waiting":
        waiting.splice(waiting.indexOf(seq), 1);
        seq.phase = "done";
        return;
      case "prefill-queued":
        prefillQueue.splice(prefillQueue.indexOf(seq), 1);
        break;
      case "prefilling":
        // The prefill unit is free from now; its blocks were never published.
        seq.cancelPrefill?.();
        seq.cancelPrefill = undefined;
        prefilling = undefined;
        prefillFreeAt = clock.now();
        break;
      case "decoding":
        break;
    }
    finish(seq, clock.now());
  }

  return {
    settings: config,
    submit(request) {
      const blocks = Math.ceil((request.prompt.tokens + request.outputTokens) / BLOCK_TOKENS);
      if (blocks > config.kvCacheBlocks) {
        throw new EngineCapacityError(blocks, config.kvCacheBlocks);
      }
      const seq: Sequence = {
        request,
        phase: "waiting",
        arrivedAt: clock.now(),
        scheduledAt: 0,
        firstTokenAt: 0,
        blocks,
        held: [],
        fresh: 0,
        cachedTokens: undefined,
        generated: 0,
        cancelPrefill: undefined,
      };
      waiting.push(seq);
      schedule(seq.arrivedAt);
      startPrefill(seq.arrivedAt);
      return {
        get cachedTokens() {
          return seq.cachedTokens;
        },
        cancel: () => cancel(seq),
      };
    },
    counters() {
      return {
        running,
        waiting: waiting.length,
        kvCacheUsage: cache.inUse / cache.capacity,
        cachedBlocks: cache.cached,
        ...totals,
      };
    },
    setMaxRunning(maxRunning) {
      if (!Number.isInteger(maxRunning) || maxRunning < 1) {
        throw new RangeError(`maxRunning: expected an integer of at least 1, got ${maxRunning}`);
      }
      config.maxRunning = maxRunning;
      schedule(clock.now());
      startPrefill(clock.now());
    },
    resetPrefixCache() {
      cache.evictAll();
    },
  };
}

function checkSettings(s: EngineSettings): void {
  const positiveInt = (name: keyof EngineSettings) => {
    if (!Number.isInteger(s[name]) || s[name] < 1) {
      throw new RangeError(`${name}: expected an integer of at least 1, got ${s[name]}`);
    }
  };
  positiveInt("kvCacheBlocks");
  positiveInt("maxRunning");
  if (!(s.prefillTokensPerSecond > 0) || !Number.isFinite(s.prefillTokensPerSecond)) {
    throw new RangeError(`prefillTokensPerSecond: expected a positive number`);
  }
  for (const name of ["stepBaseMs", "stepPerSequenceMs"] as const) {
    if (!(s[name] >= 0) || !Number.isFinite(s[name])) {
      throw new RangeError(`${name}: expected a number of at least 0`);
    }
  }
}

/** The real clock: `performance.now()` and timers. */
export const REAL_ENGINE_CLOCK: EngineClock = {
  now: () => performance.now(),
  at(at, fn) {
    const timer = setTimeout(fn, Math.max(0, at - performance.now()));
    return () => clearTimeout(timer);
  },
};
