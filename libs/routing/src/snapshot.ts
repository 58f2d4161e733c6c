import { NODE_APIS } from "@zml/contracts";
import type { ModelSpec, NodeApi, NodeSpec, PolicySpec, Tier } from "@zml/contracts";
import { resolveOptions, type RoutingOptions } from "./options.ts";
import {
  builtinDefaultPolicy,
  compilePolicy,
  DEFAULT_POLICY_NAME,
  type ResolvedPolicy,
} from "./policy.ts";
import { resolveNodePrice } from "./price.ts";
import type { CostEntry, QualityScore } from "./schemas.ts";
import type { NodeEntry } from "./types.ts";

/** The nodes of one family that serve one model at one tier, in registration order. */
export interface FamilyGroup {
  readonly family: string;
  readonly nodes: readonly NodeEntry[];
  /** Quality score for this model, aligned with `nodes`; node scores beat family scores. */
  readonly quality: readonly (QualityScore | null)[];
  /** `nodes[j].index`, flat for the decision loop. */
  readonly indices: Int32Array;
  /** `quality[j]` score and `updated_at`, NaN when there is none. */
  readonly qualityScore: Float64Array;
  readonly qualityAt: Float64Array;
  /**
   * The same nodes narrowed to those serving one API, indexed by the API's position in
   * `NODE_APIS`: the decision walks only these, never testing a node's API set.
   */
  readonly byApi: readonly ApiSlice[];
}

/** The nodes of a {@link FamilyGroup} that serve one API, with their quality columns. */
export interface ApiSlice {
  readonly indices: Int32Array;
  readonly qualityScore: Float64Array;
  readonly qualityAt: Float64Array;
  /** Nodes of the group that do not serve the API. */
  readonly otherApi: number;
}

/** Every node serving one model at one tier, grouped by family. */
export interface ModelTierBucket {
  readonly model: string;
  readonly tier: Tier;
  readonly families: ReadonlyMap<string, FamilyGroup>;
  readonly size: number;
}

/**
 * Everything the routing decision needs from configuration, indexed once per change so
 * that {@link decide} does a couple of map reads and then walks arrays.
 */
export interface RoutingSnapshot {
  readonly nodes: readonly NodeEntry[];
  readonly nodeIndex: ReadonlyMap<string, number>;
  /** Per node index: `max_concurrency`, and the node-hour price (NaN when unpriced). */
  readonly maxConcurrency: Float64Array;
  readonly usdPerHour: Float64Array;
  /** Per node index: the APIs it serves, one bit each (see {@link apiBit}). */
  readonly apiMask: Uint8Array;
  readonly models: ReadonlyMap<string, ModelSpec>;
  readonly policies: ReadonlyMap<string, ResolvedPolicy>;
  /** `balanced`: the registered policy of that name, else the built-in one. */
  readonly defaultPolicy: ResolvedPolicy;
  /** Accelerator families in the order their first node was registered. */
  readonly families: readonly string[];
  /** model → tier (1–4) → bucket. */
  readonly buckets: ReadonlyMap<string, readonly (ModelTierBucket | undefined)[]>;
  /**
   * Node-hour price assumed for unpriced nodes when ranking: the highest known price, so
   * that a node without a cost entry never looks cheaper than a priced one. 0 when nothing
   * is priced.
   */
  readonly fallbackUsdPerHour: number;
  /** The `now` prices were resolved at. */
  readonly builtAt: number;
  /**
   * The first instant a fresh spot price of this snapshot ages out (Infinity when none
   * does): rebuild the snapshot then, so that the price falls back to the node's configured
   * rate. Keeping the clock out of the decision keeps {@link decide} pure and its loop lean.
   */
  readonly pricesValidUntil: number;
  readonly options: Readonly<RoutingOptions>;
  /** Configuration problems that were tolerated (dangling references, conflicts). */
  readonly warnings: readonly string[];
}

export interface SnapshotInput {
  nodes: readonly NodeSpec[];
  models?: readonly ModelSpec[] | undefined;
  policies?: readonly PolicySpec[] | undefined;
  costs?: readonly CostEntry[] | undefined;
  quality?: readonly QualityScore[] | undefined;
  /**
   * Epoch ms at which spot prices are judged fresh or aged out. Default 0: every price
   * counts as fresh (for callers that do not follow time, such as tests of ranking alone).
   */
  now?: number | undefined;
}

/** The bit of `api` in {@link RoutingSnapshot.apiMask}. */
export function apiBit(api: NodeApi): number {
  return 1 << NODE_APIS.indexOf(api);
}

function apiMaskOf(apis: readonly NodeApi[]): number {
  let mask = 0;
  for (const api of apis) mask |= apiBit(api);
  return mask;
}

function apiSliceOf(
  nodes: readonly NodeEntry[],
  quality: readonly (QualityScore | null)[],
  api: NodeApi,
): ApiSlice {
  const keep: number[] = [];
  nodes.forEach((e, j) => {
    if (e.spec.apis.includes(api)) keep.push(j);
  });
  return Object.freeze({
    indices: Int32Array.from(keep, (j) => nodes[j]!.index),
    qualityScore: Float64Array.from(keep, (j) => quality[j]?.score ?? Number.NaN),
    qualityAt: Float64Array.from(keep, (j) => quality[j]?.updated_at ?? Number.NaN),
    otherApi: nodes.length - keep.length,
  });
}

const key2 = (a: string, b: string): string => `${a}\u0000${b}`;

function indexCosts(
  nodes: readonly NodeSpec[],
  costs: readonly CostEntry[],
  warnings: string[],
): { byNode: Map<string, CostEntry>; byFamily: Map<string, CostEntry> } {
  const familyOf = new Map(nodes.map((n) => [n.id, n.accelerator_family]));
  const byNode = new Map<string, CostEntry>();
  const byFamily = new Map<string, CostEntry>();
  const setNode = (nodeId: string, entry: CostEntry): void => {
    if (byNode.has(nodeId))
      warnings.push(`cost: node ${nodeId} priced twice; the later entry wins`);
    byNode.set(nodeId, entry);
  };
  for (const entry of costs) {
    if (entry.kind === "cloud_spot") {
      for (const nodeId of entry.nodes) {
        const family = familyOf.get(nodeId);
        if (family === undefined) {
          warnings.push(`cost: cloud_spot ${entry.cloud_account} names unknown node ${nodeId}`);
        } else if (family !== entry.family) {
          warnings.push(
            `cost: cloud_spot ${entry.cloud_account} prices ${entry.family} but node ${nodeId} is ${family}; ignored`,
          );
        } else setNode(nodeId, entry);
      }
    } else if (entry.node_id !== undefined) {
      if (!familyOf.has(entry.node_id))
        warnings.push(`cost: on_prem names unknown node ${entry.node_id}`);
      else setNode(entry.node_id, entry);
    } else if (entry.family !== undefined) {
      if (byFamily.has(entry.family)) {
        warnings.push(`cost: family ${entry.family} priced twice; the later entry wins`);
      }
      byFamily.set(entry.family, entry);
    }
  }
  return { byNode, byFamily };
}

/**
 * Says, once per snapshot, which nodes route on something other than a fresh price: an aged
 * spot price (on the fallback rate, or on none) and, once any node is priced, a node
 * without a price (ranked at the highest known one). A fleet with no prices at all says
 * nothing: cost then decides nothing.
 */
function notePriceProblems(
  nodes: readonly NodeEntry[],
  highest: number,
  now: number,
  warnings: string[],
): void {
  const anyPriced = nodes.some((e) => e.usdPerHour !== null);
  for (const { spec, price } of nodes) {
    const aged =
      price.stale && price.updatedAt !== null
        ? `spot price ${Math.round((now - price.updatedAt) / 1000)}s old is past its ${Math.round(price.maxAgeMs! / 1000)}s age limit`
        : undefined;
    if (price.source === "fallback" && aged !== undefined) {
      warnings.push(`cost: node ${spec.id} ${aged}; using its fallback rate ${price.usdPerHour}/h`);
    } else if (price.source === "none" && anyPriced) {
      warnings.push(
        `cost: node ${spec.id} has no usable price (${aged ?? "no cost entry"}); ranked at the highest known price ${highest}/h`,
      );
    }
  }
}

function indexQuality(quality: readonly QualityScore[]): {
  byNode: Map<string, QualityScore>;
  byFamily: Map<string, QualityScore>;
} {
  const byNode = new Map<string, QualityScore>();
  const byFamily = new Map<string, QualityScore>();
  // Several sources may score the same target; the most recent measurement wins.
  const keep = (map: Map<string, QualityScore>, key: string, score: QualityScore): void => {
    const prior = map.get(key);
    if (!prior || score.updated_at >= prior.updated_at) map.set(key, score);
  };
  for (const score of quality) {
    if (score.node_id !== undefined) keep(byNode, key2(score.model, score.node_id), score);
    else if (score.family !== undefined) keep(byFamily, key2(score.model, score.family), score);
  }
  return { byNode, byFamily };
}

/**
 * Builds the routing snapshot from parsed configuration. Call it again whenever nodes,
 * models, policies, costs or quality scores change, then {@link LiveTable.rebind} the live
 * table. Never throws on consistent-typed input: duplicates and dangling references are
 * resolved as documented and reported in `warnings`.
 */
export function buildSnapshot(
  input: SnapshotInput,
  options: Partial<RoutingOptions> = {},
): RoutingSnapshot {
  const opts = resolveOptions(options);
  const warnings: string[] = [];

  const unique: NodeSpec[] = [];
  const seen = new Set<string>();
  for (const node of input.nodes) {
    if (seen.has(node.id)) {
      warnings.push(`node ${node.id} registered twice; the first one is kept`);
      continue;
    }
    seen.add(node.id);
    unique.push(node);
  }
  // Registration order drives the default policy's chain and the final tie-break.
  const ordered = unique
    .map((node, i) => ({ node, i }))
    .sort((a, b) => a.node.registered_at - b.node.registered_at || a.i - b.i)
    .map(({ node }) => node);

  const costs = indexCosts(ordered, input.costs ?? [], warnings);
  const quality = indexQuality(input.quality ?? []);

  const families: string[] = [];
  const nodeIndex = new Map<string, number>();
  const nodes: NodeEntry[] = [];
  let fallbackUsdPerHour = 0;
  let pricesValidUntil = Number.POSITIVE_INFINITY;
  const now = input.now ?? 0;
  for (const spec of ordered) {
    if (!families.includes(spec.accelerator_family)) families.push(spec.accelerator_family);
    const cost = costs.byNode.get(spec.id) ?? costs.byFamily.get(spec.accelerator_family) ?? null;
    const price = resolveNodePrice(spec, cost, now, opts.spotPriceMaxAgeMs);
    const usdPerHour = price.usdPerHour;
    if (usdPerHour !== null) fallbackUsdPerHour = Math.max(fallbackUsdPerHour, usdPerHour);
    pricesValidUntil = Math.min(pricesValidUntil, price.validUntil);
    nodeIndex.set(spec.id, nodes.length);
    nodes.push(Object.freeze({ index: nodes.length, spec, usdPerHour, cost, price }));
  }
  notePriceProblems(nodes, fallbackUsdPerHour, now, warnings);

  interface Draft {
    nodes: NodeEntry[];
    quality: (QualityScore | null)[];
  }
  // model → tier → family → nodes, in registration order.
  const drafts = new Map<string, Map<string, Draft>[]>();
  for (const entry of nodes) {
    const { spec } = entry;
    for (const model of new Set(spec.models)) {
      let byTier = drafts.get(model);
      if (!byTier) drafts.set(model, (byTier = []));
      const byFamily = (byTier[spec.tier] ??= new Map<string, Draft>());
      let draft = byFamily.get(spec.accelerator_family);
      if (!draft) byFamily.set(spec.accelerator_family, (draft = { nodes: [], quality: [] }));
      draft.nodes.push(entry);
      draft.quality.push(
        quality.byNode.get(key2(model, spec.id)) ??
          quality.byFamily.get(key2(model, spec.accelerator_family)) ??
          null,
      );
    }
  }
  const buckets = new Map<string, (ModelTierBucket | undefined)[]>();
  for (const [model, byTier] of drafts) {
    const tiers: (ModelTierBucket | undefined)[] = [
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ];
    byTier.forEach((byFamily, tier) => {
      const families = new Map<string, FamilyGroup>();
      let size = 0;
      for (const [family, draft] of byFamily) {
        families.set(
          family,
          Object.freeze({
            family,
            nodes: draft.nodes,
            quality: draft.quality,
            indices: Int32Array.from(draft.nodes, (e) => e.index),
            qualityScore: Float64Array.from(draft.quality, (q) => q?.score ?? Number.NaN),
            qualityAt: Float64Array.from(draft.quality, (q) => q?.updated_at ?? Number.NaN),
            byApi: NODE_APIS.map((api) => apiSliceOf(draft.nodes, draft.quality, api)),
          }),
        );
        size += draft.nodes.length;
      }
      tiers[tier] = Object.freeze({ model, tier, families, size });
    });
    buckets.set(model, tiers);
  }

  const models = new Map<string, ModelSpec>();
  for (const model of input.models ?? []) models.set(model.id, model);
  const policies = new Map<string, ResolvedPolicy>();
  for (const spec of input.policies ?? []) {
    if (policies.has(spec.name))
      warnings.push(`policy ${spec.name} defined twice; the later one wins`);
    policies.set(spec.name, compilePolicy(spec));
  }
  const defaultPolicy =
    policies.get(DEFAULT_POLICY_NAME) ??
    builtinDefaultPolicy(families, opts.defaultLatencyTargetMs);
  policies.set(DEFAULT_POLICY_NAME, defaultPolicy);
  for (const model of models.values()) {
    if (model.default_policy !== undefined && !policies.has(model.default_policy)) {
      warnings.push(`model ${model.id} defaults to unknown policy ${model.default_policy}`);
    }
  }

  return Object.freeze({
    nodes: Object.freeze(nodes),
    nodeIndex,
    maxConcurrency: Float64Array.from(nodes, (e) => e.spec.max_concurrency),
    usdPerHour: Float64Array.from(nodes, (e) => e.usdPerHour ?? Number.NaN),
    apiMask: Uint8Array.from(nodes, (e) => apiMaskOf(e.spec.apis)),
    models,
    policies,
    defaultPolicy,
    families: Object.freeze(families),
    buckets,
    fallbackUsdPerHour,
    builtAt: now,
    pricesValidUntil,
    options: opts,
    warnings: Object.freeze(warnings),
  });
}
