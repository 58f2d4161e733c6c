/**
 * The KV-cache block pool of a simulated vLLM engine: `capacity` blocks, each either free,
 * held by running sequences, or holding a cached prompt block that no one uses (evictable).
 *
 * As in vLLM's automatic prefix caching, a cached block is found by the hash of its whole
 * prefix; a block freed by its last user stays cached until the pool needs it, and the pool
 * evicts the least recently freed one first. A sequence frees its blocks last block first, so
 * a prefix's tail is evicted before its head (which more prompts share).
 */
export interface BlockCache {
  readonly capacity: number;
  /** Blocks held by running sequences (cached and private): what `kv_cache_usage_perc` counts. */
  readonly inUse: number;
  /** Blocks holding a cached prompt block, held or not. */
  readonly cached: number;
  /** How many of `hashes`, from the first, are cached now (at most `limit`). Changes nothing. */
  matchPrefix(hashes: readonly string[], limit: number): number;
  /**
   * Holds the cached blocks `hashes` (all cached: a {@link matchPrefix} answer) and `fresh`
   * private blocks, evicting least recently freed cached blocks to make room. False, with
   * nothing changed, when the pool cannot hold that many beside what running sequences hold.
   */
  allocate(hashes: readonly string[], fresh: number): boolean;
  /**
   * Turns private blocks of a sequence into cached ones under `hashes` (its prompt blocks
   * just computed). A hash cached meanwhile by another sequence is shared instead, and the
   * private block it would have taken is freed. Returns how many private blocks it used.
   */
  publish(hashes: readonly string[]): number;
  /**
   * Frees what a sequence held: its cached blocks `hashes` (in prompt order; freed last first)
   * and `fresh` private blocks.
   */
  release(hashes: readonly string[], fresh: number): void;
  /** Evicts every cached block that no sequence holds (vLLM's `reset_prefix_cache`). */
  evictAll(): void;
}

interface CachedBlock {
  /** Running sequences holding it; 0: evictable. */
  holders: number;
}

/** @param capacity blocks in the pool, at least 1. */
export function createBlockCache(capacity: number): BlockCache {
  if (!Number.isInteger(capacity) || capacity < 1) {
    throw new RangeError(`capacity: expected an integer of at least 1, got ${capacity}`);
  }
  const blocks = new Map<string, CachedBlock>();
  // Evictable blocks in the order they were freed: a Map iterates in insertion order, so the
  // first key is the least recently freed and a re-insert moves a block to the back.
  const evictable = new Map<string, true>();
  let privateBlocks = 0;
  let heldCached = 0;

  const free = (): number => capacity - privateBlocks - blocks.size;

  function evictOne(): boolean {
    const first = evictable.keys().next();
    if (first.done === true) return false;
    evictable.delete(first.value);
    blocks.delete(first.value);
    return true;
  }

  function hold(hash: string): void {
    const block = blocks.get(hash);
    if (block === undefined) throw new Error("hold: block is not cached");
    if (block.holders === 0) {
      evictable.delete(hash);
      heldCached += 1;
    }
    block.holders += 1;
  }

  return {
    capacity,
    get inUse() {
      return privateBlocks + heldCached;
    },
    get cached() {
      return blocks.size;
    },
    matchPrefix(hashes, limit) {
      const end = Math.min(limit, hashes.length);
      let n = 0;
      while (n < end && blocks.has(hashes[n]!)) n += 1;
      return n;
    },
    allocate(hashes, fresh) {
      // Blocks among `hashes` that are evictable now stop being so once held.
      let reclaimable = evictable.size;
      for (const hash of hashes) if (evictable.has(hash)) reclaimable -= 1;
      if (free() + reclaimable < fresh) return false;
      for (const hash of hashes) hold(hash);
      while (free() < fresh) evictOne();
      privateBlocks += fresh;
      return true;
    },
    publish(hashes) {
      let used = 0;
      for (const hash of hashes) {
        const existing = blocks.get(hash);
        privateBlocks -= 1;
        if (existing === undefined) {
          blocks.set(hash, { holders: 1 });
          heldCached += 1;
          used += 1;
        } else {
          hold(hash);
        }
      }
      return used;
    },
    release(hashes, fresh) {
      privateBlocks -= fresh;
      for (let i = hashes.length - 1; i >= 0; i--) {
        const hash = hashes[i]!;
        const block = blocks.get(hash);
        if (block === undefined) continue;
        block.holders -= 1;
        if (block.holders === 0) {
          heldCached -= 1;
          evictable.set(hash, true);
        }
      }
    },
    evictAll() {
      while (evictOne());
    },
  };
}
