/*
 * The routing decision runs in three passes over one bucket (the nodes serving a model at a
 * tier): `filter` (filter.ts) records why each unusable node is out, `rank` (rank.ts) keys and
 * keeps the best few of the rest, and `reject` (reject.ts) explains an empty result.
 *
 * Why it looks the way it does: a decision runs for every request, on the dispatcher's event
 * loop, over up to thousands of nodes. So the passes write into one set of typed arrays, one
 * slot per viable node, allocated once and grown when a bigger bucket comes (`Scratch`), and
 * read the live table's per-node arrays by dense index instead of objects keyed by node id.
 * The hot loops keep their values in locals and avoid closures, so a decision allocates only
 * what it returns (its candidates and the packed passed-over codes, expanded on first read).
 * `test/reference-decide.ts` keeps a plain version as the oracle that every change is checked
 * against (`indexed-decide.test.ts`, `properties.test.ts`), and `npm run bench` in this
 * package times it.
 */
import type { NodeApi, Tier } from "@zml/contracts";
import type { LiveTable } from "./live-table.ts";
import type { ModelTierBucket, RoutingSnapshot } from "./snapshot.ts";

/*
 * Scratch space for one decision, one slot per viable node, reused across calls so that
 * the hot path allocates only what it returns. decide() is synchronous and never calls
 * itself, so sharing is safe.
 */
export class Scratch {
  size: number;
  /**
   * Per viable slot: node index and (quality mode only) fresh quality score (written by
   * `filter` for every slot); estimates, `overTarget` and keys (written by `rank` only for
   * the slots that entered the top, the only ones read afterwards).
   */
  idx: Int32Array;
  /**
   * The slots in runs of one family each, in visiting order: run `r` ends before slot
   * `runEnd[r]` and its family has position `runPosition[r]` (0 for the hinted family,
   * else 1 + its index in the policy's chain). Written by `filter`.
   */
  runEnd = new Int32Array(8);
  runPosition = new Int32Array(8);
  runs = 0;
  depth: Float64Array;
  /** Service time of one request on the node (ms), see `serviceMs`. */
  service: Float64Array;
  resp: Float64Array;
  quality: Float64Array;
  /** 1 when the node's estimate is over the policy's latency target (README "group"), else 0. */
  overTarget: Float64Array;
  /**
   * The sort keys, compared in this order (README's k1..k4): the latency group folded with
   * the hint or family position; the ranking mode's score; its tie-break; and (quality
   * mode only) the negated health score.
   */
  preferenceKey: Float64Array;
  scoreKey: Float64Array;
  tieBreakKey: Float64Array;
  healthKey: Float64Array;
  /** The listed slots in ascending order, for {@link dropListed}. */
  listed: Int32Array;
  /** Packed (node, reason) of every filtered node. */
  passed: Int32Array;
  top: Int32Array;
  // Outputs of filter().
  viable = 0;
  passedCount = 0;
  considered = 0;
  /** Nodes of the policy's families left out because they do not serve the request's API. */
  otherApi = 0;
  transient = 0;
  soonestFreeMs = 0;
  /** Best throughput among the viable measured nodes (filter). */
  bestTps = 0;
  /** Whether any viable node had a fresh quality score (rank). */
  anyFresh = false;

  constructor(size: number) {
    this.size = size;
    this.idx = new Int32Array(size);
    this.depth = new Float64Array(size);
    this.service = new Float64Array(size);
    this.resp = new Float64Array(size);
    this.quality = new Float64Array(size);
    this.overTarget = new Float64Array(size);
    this.preferenceKey = new Float64Array(size);
    this.scoreKey = new Float64Array(size);
    this.tieBreakKey = new Float64Array(size);
    this.healthKey = new Float64Array(size);
    this.listed = new Int32Array(64);
    this.passed = new Int32Array(size);
    this.top = new Int32Array(64);
  }
}

let scratch = new Scratch(64);

/** Per node index, 1 while the node is excluded by the decision in progress; else 0. */
let excludedMarks = new Uint8Array(64);

export function markExcluded(
  snapshot: RoutingSnapshot,
  exclude: ReadonlySet<string> | undefined,
): Uint8Array | undefined {
  if (exclude === undefined) return undefined;
  if (excludedMarks.length < snapshot.nodes.length) {
    excludedMarks = new Uint8Array(Math.max(snapshot.nodes.length, excludedMarks.length * 2));
  }
  for (const id of exclude) {
    const i = snapshot.nodeIndex.get(id);
    if (i !== undefined) excludedMarks[i] = 1;
  }
  return excludedMarks;
}

export function unmarkExcluded(
  snapshot: RoutingSnapshot,
  exclude: ReadonlySet<string>,
  marks: Uint8Array,
): void {
  for (const id of exclude) {
    const i = snapshot.nodeIndex.get(id);
    if (i !== undefined) marks[i] = 0;
  }
}

export function scratchFor(n: number): Scratch {
  if (n > scratch.size) scratch = new Scratch(Math.max(n, scratch.size * 2));
  return scratch;
}

/** The request-level inputs of one decision, resolved once. */
export interface Context {
  snapshot: RoutingSnapshot;
  live: LiveTable;
  bucket: ModelTierBucket;
  chain: readonly string[];
  hint: string | undefined;
  exclude: ReadonlySet<string> | undefined;
  tier: Tier;
  api: NodeApi;
  /** Position of `api` in `NODE_APIS`: which `ApiSlice` (snapshot.ts) of each family to walk. */
  apiIndex: number;
  tokens: number;
  target: number;
  now: number;
  /** Quality scores measured before this are stale; NaN outside quality mode. */
  staleBefore: number;
  /**
   * Set when some node holds enough of the request's prompt prefix to route on (README,
   * "Prefix affinity"); every estimate then adds the prefill of what the node lacks.
   */
  prefix: PrefixContext | undefined;
}

export interface PrefixContext {
  /** The prompt's size in tokens. */
  promptTokens: number;
  /** Per node index: leading prefix blocks the node is expected to hold. */
  blocks: Float64Array;
}
