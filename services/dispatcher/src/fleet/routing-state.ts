import type { ModelSpec, NodeSpec, NodeState, PolicySpec } from "@zml/contracts";
import { buildSnapshot, createLiveTable } from "@zml/routing";
import type { CostEntry, LiveTable, QualityScore, RoutingSnapshot } from "@zml/routing";

/** The configuration maps watched from KV. */
export interface ConfigSources {
  nodes: ReadonlyMap<string, NodeSpec>;
  models: ReadonlyMap<string, ModelSpec>;
  policies: ReadonlyMap<string, PolicySpec>;
  costs: ReadonlyMap<string, CostEntry>;
  quality: ReadonlyMap<string, QualityScore>;
  states: ReadonlyMap<string, NodeState>;
}

/**
 * The routing core's snapshot (rebuilt only when configuration changes, or when one of its
 * spot prices ages out) and the live table of node state, in-flight counts, cooldowns and
 * attestations that decisions read. All memory: nothing here touches the network.
 */
export interface RoutingState {
  /** Current snapshot and live table, rebuilding the snapshot first if config changed. */
  current(): { snapshot: RoutingSnapshot; live: LiveTable };
  configChanged(): void;
  /** Applies a node state; true when it may have freed capacity. */
  stateChanged(nodeId: string, state: NodeState | undefined): boolean;
  /** Stops the price-expiry timer. */
  stop(): void;
}

export interface RoutingStateOptions {
  /** Epoch ms; prices are judged fresh or aged out at the build time. Default: always 0. */
  clock?: () => number;
  /** Called with each snapshot's warnings that the previous snapshot did not have. */
  onWarnings?: (warnings: readonly string[]) => void;
}

/** Longest single timer wait (setTimeout's limit is about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export function createRoutingState(
  sources: ConfigSources,
  options: RoutingStateOptions = {},
): RoutingState {
  const clock = options.clock ?? (() => 0);
  let warned = new Set<string>();
  // Each node's unserved models as the current snapshot was built with them: a state that
  // changes them rebuilds the snapshot (rare: an operator's registration or an engine's
  // model changed), any other state only updates the live table.
  let builtUnserved = new Map<string, string>();
  let expiry: NodeJS.Timeout | undefined;
  let dirty = false;
  let stopped = false;

  const rebuild = (): RoutingSnapshot => {
    builtUnserved = new Map([...sources.states].map(([id, state]) => [id, unservedKey(state)]));
    const next = build(sources, clock());
    const fresh = next.warnings.filter((w) => !warned.has(w));
    warned = new Set(next.warnings);
    if (fresh.length > 0) options.onWarnings?.(fresh);
    // A spot price that ages out changes the snapshot without any config change: a timer
    // marks it stale then, so the clock is read once per expiry and never per decision.
    if (expiry) clearTimeout(expiry);
    expiry = undefined;
    if (!stopped && Number.isFinite(next.pricesValidUntil)) {
      const wait = Math.min(MAX_TIMER_MS, Math.max(0, next.pricesValidUntil - clock()) + 1);
      expiry = setTimeout(() => {
        dirty = true;
      }, wait);
      expiry.unref();
    }
    return next;
  };

  let snapshot = rebuild();
  const live = createLiveTable(snapshot);
  for (const s of sources.states.values()) live.applyState(s);

  const current = () => {
    if (dirty) {
      dirty = false;
      snapshot = rebuild();
      live.rebind(snapshot);
      // A state that arrived for a node the old snapshot did not know was dropped.
      for (const s of sources.states.values()) live.applyState(s);
    }
    return { snapshot, live };
  };
  return {
    current,
    configChanged() {
      dirty = true;
    },
    stateChanged(nodeId, state) {
      if ((builtUnserved.get(nodeId) ?? "") !== unservedKey(state)) dirty = true;
      const { live: table } = current();
      return state ? table.applyState(state) : table.clearState(nodeId);
    },
    stop() {
      stopped = true;
      if (expiry) clearTimeout(expiry);
    },
  };
}

function unservedKey(state: NodeState | undefined): string {
  return state?.unserved_models.join("\n") ?? "";
}

/**
 * A node is offered only the registered models its engine serves: one registered for a model
 * its engine refuses (`unserved_models`, from the health aggregator) is not routed that model.
 */
function servedRegistration(spec: NodeSpec, state: NodeState | undefined): NodeSpec {
  if (state === undefined || state.unserved_models.length === 0) return spec;
  const refused = new Set(state.unserved_models);
  return { ...spec, models: spec.models.filter((m) => !refused.has(m)) };
}

function build(sources: ConfigSources, now: number): RoutingSnapshot {
  return buildSnapshot({
    nodes: [...sources.nodes.values()].map((spec) =>
      servedRegistration(spec, sources.states.get(spec.id)),
    ),
    models: [...sources.models.values()],
    policies: [...sources.policies.values()],
    costs: [...sources.costs.values()],
    quality: [...sources.quality.values()],
    now,
  });
}
