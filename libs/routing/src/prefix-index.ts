/*
 * What each node is expected to hold in its prefix cache: the block digests of the prompts
 * recently sent there (by this dispatcher or, through placements, by its peers), per node an
 * LRU bounded by the node's cache size. The decision asks it once per request which nodes hold
 * how much of the request's prefix (`match`), by digest, not per candidate node.
 *
 * It corrects itself from what the nodes report: a node that restarts or is isolated forgets
 * everything; a node whose measured hit rate falls well short of what this index expected for
 * the prompts sent there keeps fewer blocks (its cache is smaller, or busier, than assumed),
 * and earns them back when the rates agree again. README, "Prefix affinity".
 */
import { CHARS_PER_TOKEN, PREFIX_BLOCK_CHARS } from "./prompt-prefix.ts";

/** Tokens per index block. */
const BLOCK_TOKENS = PREFIX_BLOCK_CHARS / CHARS_PER_TOKEN;
/** Prompt characters a node must have been sent before its hit rate is compared: 16 blocks. */
const MIN_SAMPLE_CHARS = 16 * PREFIX_BLOCK_CHARS;
/** Expected hit rates below this say too little to correct on. */
const MIN_EXPECTED_RATE = 0.2;
/** The smallest share of its cache a node is trusted to keep. */
const MIN_FACTOR = 1 / 64;

/** One node's blocks, oldest first (a `Map` iterates in insertion order). */
class NodeBlocks {
  index: number;
  readonly blocks = new Map<number, true>();
  capacityTokens: number;
  /** Share of `capacityTokens` the hit counters let the index assume: (0, 1]. */
  factor = 1;
  limit = 0;
  /** This replica's dispatches since the node's last hit-rate reading. */
  expectedChars = 0;
  promptChars = 0;

  constructor(index: number, capacityTokens: number) {
    this.index = index;
    this.capacityTokens = capacityTokens;
    this.updateLimit();
  }

  updateLimit(): void {
    this.limit = Math.max(1, Math.floor((this.capacityTokens * this.factor) / BLOCK_TOKENS));
  }
}

/** The decision's view of one match: per live-table index, the blocks the node holds. */
export interface PrefixMatch {
  /** Per node index: leading blocks of the request's prefix the node is expected to hold. */
  readonly blocks: Float64Array;
  /** The most any node holds. */
  readonly best: number;
}

export class PrefixIndex {
  readonly #holders = new Map<number, NodeBlocks[]>();
  readonly #nodes = new Map<string, NodeBlocks>();
  readonly #defaultCapacityTokens: number;
  /** Per live-table index; zero except during a decision (see {@link clearMatch}). */
  #matched: Float64Array;
  #touched: NodeBlocks[] = [];

  constructor(nodeCount: number, defaultCapacityTokens: number) {
    this.#matched = new Float64Array(nodeCount);
    this.#defaultCapacityTokens = defaultCapacityTokens;
  }

  /**
   * Records that `digests` (a prompt's blocks, in order) were sent to the node, which will hold
   * them once it has prefilled. The blocks go in tail first, so that the node's LRU gives up
   * a prompt's tail before its head, as engines do. `expectedBlocks` and `promptChars` (this
   * replica's own dispatches only) are what the decision expected, for the hit-rate check.
   */
  record(
    nodeId: string,
    index: number,
    digests: Float64Array,
    own?: { expectedBlocks: number; promptChars: number },
  ): void {
    const node = this.#node(nodeId, index);
    const blocks = node.blocks;
    for (let r = digests.length - 1; r >= 0; r--) {
      const d = digests[r]!;
      if (blocks.delete(d)) {
        blocks.set(d, true);
        continue;
      }
      blocks.set(d, true);
      const holders = this.#holders.get(d);
      if (holders === undefined) this.#holders.set(d, [node]);
      else holders.push(node);
    }
    this.#evict(node);
    if (own !== undefined) {
      node.expectedChars += own.expectedBlocks * PREFIX_BLOCK_CHARS;
      node.promptChars += own.promptChars;
    }
  }

  /**
   * Which nodes are expected to hold how much of `digests`: the deepest block each holds
   * (a block's digest covers its whole prefix). Valid until {@link clearMatch}, which the
   * caller must call before the next match.
   */
  match(digests: Float64Array): PrefixMatch {
    const matched = this.#matched;
    let best = 0;
    for (let r = 0; r < digests.length; r++) {
      const holders = this.#holders.get(digests[r]!);
      if (holders === undefined) continue;
      for (const node of holders) {
        if (matched[node.index] === 0) this.#touched.push(node);
        matched[node.index] = r + 1;
        best = r + 1;
      }
    }
    return { blocks: matched, best };
  }

  clearMatch(): void {
    for (const node of this.#touched) this.#matched[node.index] = 0;
    this.#touched.length = 0;
  }

  /** The node's KV-cache size in tokens; `null` restores the default. */
  setCapacity(nodeId: string, index: number, tokens: number | null): void {
    const capacity = tokens !== null && tokens > 0 ? tokens : this.#defaultCapacityTokens;
    const node = this.#node(nodeId, index);
    if (node.capacityTokens === capacity) return;
    node.capacityTokens = capacity;
    node.updateLimit();
    this.#evict(node);
  }

  /**
   * The node's measured prefix-cache hit rate over its last poll interval. Compared with
   * what this replica expected of its own dispatches since the last reading: well short
   * (under half) halves the blocks the index keeps for the node; in line (at least 80 %)
   * doubles them back up to its capacity. Too small a sample waits for the next reading.
   */
  observeHitRate(nodeId: string, observed: number): void {
    const node = this.#nodes.get(nodeId);
    if (node === undefined || node.promptChars < MIN_SAMPLE_CHARS) return;
    const expected = node.expectedChars / node.promptChars;
    node.expectedChars = 0;
    node.promptChars = 0;
    if (expected < MIN_EXPECTED_RATE) return;
    if (observed < expected * 0.5) node.factor = Math.max(MIN_FACTOR, node.factor / 2);
    else if (observed >= expected * 0.8) node.factor = Math.min(1, node.factor * 2);
    else return;
    node.updateLimit();
    this.#evict(node);
  }

  /** Forgets every block of the node (it restarted, or was isolated). */
  forget(nodeId: string): void {
    const node = this.#nodes.get(nodeId);
    if (node === undefined) return;
    for (const d of node.blocks.keys()) this.#unhold(d, node);
    node.blocks.clear();
    node.expectedChars = 0;
    node.promptChars = 0;
  }

  /** Follows the live table to a new snapshot; nodes it no longer has are dropped. */
  rebind(nodeIndex: ReadonlyMap<string, number>): void {
    this.#matched = new Float64Array(nodeIndex.size);
    this.#touched.length = 0;
    for (const [id, node] of this.#nodes) {
      const index = nodeIndex.get(id);
      if (index === undefined) {
        this.forget(id);
        this.#nodes.delete(id);
      } else node.index = index;
    }
  }

  /** Blocks kept for the node, and how many it may keep; for tests and metrics. */
  sizeOf(nodeId: string): { blocks: number; limit: number } {
    const node = this.#nodes.get(nodeId);
    return { blocks: node?.blocks.size ?? 0, limit: node?.limit ?? 0 };
  }

  #node(nodeId: string, index: number): NodeBlocks {
    let node = this.#nodes.get(nodeId);
    if (node === undefined) {
      node = new NodeBlocks(index, this.#defaultCapacityTokens);
      this.#nodes.set(nodeId, node);
    }
    return node;
  }

  #evict(node: NodeBlocks): void {
    const blocks = node.blocks;
    while (blocks.size > node.limit) {
      const oldest = blocks.keys().next().value!;
      blocks.delete(oldest);
      this.#unhold(oldest, node);
    }
  }

  #unhold(digest: number, node: NodeBlocks): void {
    const holders = this.#holders.get(digest);
    if (holders === undefined) return;
    const at = holders.indexOf(node);
    if (at >= 0) holders.splice(at, 1);
    if (holders.length === 0) this.#holders.delete(digest);
  }
}
