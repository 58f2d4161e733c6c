import type { NodeState } from "@zml/contracts";
import { prefillMsFrom } from "./estimate.ts";
import { PrefixIndex } from "./prefix-index.ts";
import { PREFIX_BLOCK_CHARS, tokensOfChars } from "./prompt-prefix.ts";
import type { PromptPrefix } from "./prompt-prefix.ts";
import type { RoutingSnapshot } from "./snapshot.ts";

/** Values of {@link LiveTable.status}. */
export const LIVE_STATUS = { unknown: 0, active: 1, inactive: 2 } as const;

/**
 * What the dispatcher knows about each node right now, as flat arrays indexed by
 * {@link NodeEntry.index} so a decision reads them without hashing node ids. The dispatcher
 * feeds it from `node.state` broadcasts, its own dispatches and observations, and the
 * attestation results; {@link decide} only reads it. Unknown node ids are ignored by every
 * mutator (they return `false`), because state can arrive before the config that names it.
 */
export interface LiveTable {
  readonly snapshot: RoutingSnapshot;
  /** {@link LIVE_STATUS}: unknown until a state arrives; `inactive` covers probe_pending. */
  readonly status: Uint8Array;
  /** Queue depth from the last poll. */
  readonly polledDepth: Float64Array;
  /** Requests this dispatcher has sent and not yet finished. */
  readonly inFlight: Float64Array;
  /** Requests the other dispatcher replicas have in flight, as they last reported them. */
  readonly peerInFlight: Float64Array;
  /**
   * `inFlight + peerInFlight` when the last poll arrived: the difference to the current sum
   * is what every replica dispatched minus what finished since that poll.
   */
  readonly inFlightAtPoll: Float64Array;
  /**
   * Requests this replica may still send the node before it hears from its peers again:
   * its share of the free slots it saw at that moment (see {@link LiveTable.setPeerInFlight}).
   * Infinity while it knows of no peer.
   */
  readonly burstAllowance: Float64Array;
  readonly healthScore: Float64Array;
  /** Epoch ms until which the node is cooling down; 0 when it is not. */
  readonly cooldownUntil: Float64Array;
  /** Epoch ms until which the node's attestation is valid; 0 when it has none. */
  readonly attestedUntil: Float64Array;
  /** Observed response-time EWMA; NaN before the first observation. */
  readonly latencyEwmaMs: Float64Array;
  /** Historical tokens per second the node served; NaN when unknown. */
  readonly tokensPerSecond: Float64Array;
  /**
   * Tokens per second the node can sustain when full: its per-request speed (served rate ÷
   * requests running at the poll) × `max_concurrency`, smoothed. Unlike the served rate it
   * does not shrink when the node gets little traffic, so an idle twin of a busy node is not
   * judged slow. NaN until a poll finds the node generating.
   */
  readonly capacityTps: Float64Array;

  /*
   * Derived per node from the fields above and the snapshot, recomputed by every mutator
   * that changes an input, so that a decision reads three arrays instead of a dozen.
   */
  /** {@link effectiveDepth} of the node. */
  readonly depth: Float64Array;
  /**
   * Why the node cannot take a request whatever the request: {@link GATE}. Cooldown and
   * attestation depend on the decision's `now` and are checked by the decision itself.
   */
  readonly gate: Uint8Array;
  /**
   * Throughput the decision estimates with: `capacityTps`, else `tokensPerSecond`, at least
   * `MIN_TPS`; NaN when neither is known (the decision then uses the default).
   */
  readonly rate: Float64Array;
  /**
   * Prompt tokens per second the node prefills: measured (`prefill_tokens_per_second` of its
   * state), else declared in its spec; NaN when neither (the decision then uses the default).
   */
  readonly prefillRate: Float64Array;
  /**
   * Epoch ms until which the node is expected to be busy prefilling the prompts this replica
   * sent it: each dispatch with a prefix adds its uncached tokens ÷ `prefillRate` after the
   * later of now and the previous end (engines prefill one prompt after another).
   */
  readonly prefillBusyUntil: Float64Array;
  /** What each node is expected to hold of the prompts sent to it (prefix-index.ts). */
  readonly prefixes: PrefixIndex;

  /**
   * Records a `node.state` broadcast. Its throughput and latency EWMAs replace the table's
   * when present; a `null` keeps what the table has, unless the node reports a new
   * `instance_id` (a restarted node inherits no history).
   */
  applyState(state: NodeState): boolean;
  /** Forgets the node's state (e.g. its KV entry was deleted). */
  clearState(nodeId: string): boolean;
  /** Counts a request sent to the node; call before the payload goes out. */
  dispatched(nodeId: string): boolean;
  /**
   * Counts a request to the node as finished, however it ended. With `now` (epoch ms), the
   * total just before is remembered: a poll probed before `now` that arrives after it still
   * counts the finished request, which must not keep the node full until the next poll.
   */
  completed(nodeId: string, now?: number): boolean;
  /**
   * Replaces what the other replicas have in flight (node id → their summed count; nodes
   * missing are at 0) after hearing from a peer. With `fresh` (every peer's latest count was
   * sent after it saw this replica's latest one) each node's burst allowance is reset to
   * `ceil(free / replicas)`: replicas deciding from the same view each take their share, so
   * together at most `replicas - 1` more than there are. Otherwise an allowance can only
   * shrink. `replicas` counts this one.
   */
  setPeerInFlight(
    counts: ReadonlyMap<string, number>,
    replicas: number,
    fresh: boolean,
    now?: number,
  ): void;
  coolDown(nodeId: string, untilMs: number): boolean;
  /** Records a verified attestation valid until `untilMs`; 0 (or a past time) revokes it. */
  setAttestedUntil(nodeId: string, untilMs: number): boolean;
  /** Folds one observed response time into the node's EWMA. */
  observeLatency(nodeId: string, latencyMs: number): boolean;
  setTokensPerSecond(nodeId: string, tokensPerSecond: number): boolean;
  /** Effective queue depth: polled depth plus requests sent since that poll. */
  queueDepth(nodeId: string): number | undefined;
  /**
   * Records that a prompt with this prefix went to the node, which will cache it. `own`
   * (this replica's dispatches, not a peer's placements): the blocks the decision expected
   * the node to hold, which its measured hit rate is later compared with, and when it was
   * sent, which extends the node's prefill backlog by the tokens it does not hold.
   */
  recordPrefix(
    nodeId: string,
    prefix: PromptPrefix,
    own?: { expectedBlocks: number; now: number },
  ): boolean;
  /** Switches to a new snapshot, carrying every known value over by node id. */
  rebind(snapshot: RoutingSnapshot): void;
}

const FIELDS = [
  "status",
  "polledDepth",
  "inFlight",
  "peerInFlight",
  "inFlightAtPoll",
  "burstAllowance",
  "healthScore",
  "cooldownUntil",
  "attestedUntil",
  "latencyEwmaMs",
  "tokensPerSecond",
  "capacityTps",
  "recentPeak",
  "lastCompletionAt",
  "measuredPrefill",
  "prefillBusyUntil",
] as const;

/** Values of {@link LiveTable.gate}. */
export const GATE = {
  /** Active with a free slot: a candidate, unless cooling down or (tiers 3–4) unattested. */
  open: 0,
  /** No state has arrived. */
  noState: 1,
  /** Degraded, isolated or probe pending. */
  notActive: 2,
  /** Active, but at `max_concurrency` or out of this replica's burst allowance. */
  full: 3,
} as const;

/** Lowest throughput an estimate divides by, so every estimate stays finite. */
export const MIN_TPS = 1e-3;

/** Weight of the newest capacity sample. */
const CAPACITY_ALPHA = 0.3;

/**
 * Completions closer together than this form one busy spell whose highest in-flight total
 * is remembered (see {@link LiveTable.completed}).
 */
export const COMPLETION_SPELL_MS = 5_000;
/**
 * `checked_at` is stamped when a probe ends, after the node's metrics were read: a completion
 * up to this long before it may not be in the depth (probe time, and clock difference
 * between the health aggregator and this process).
 */
export const POLL_SLACK_MS = 1_000;

const finiteOr = (value: number, fallback: number): number =>
  Number.isFinite(value) ? value : fallback;

class Table implements LiveTable {
  snapshot: RoutingSnapshot;
  status: Uint8Array;
  polledDepth: Float64Array;
  inFlight: Float64Array;
  peerInFlight: Float64Array;
  inFlightAtPoll: Float64Array;
  burstAllowance: Float64Array;
  healthScore: Float64Array;
  cooldownUntil: Float64Array;
  attestedUntil: Float64Array;
  latencyEwmaMs: Float64Array;
  tokensPerSecond: Float64Array;
  capacityTps: Float64Array;
  /** Highest in-flight total just before a completion of the current spell, and the last one's time. */
  recentPeak: Float64Array;
  lastCompletionAt: Float64Array;
  /** The node's own prefill speed (its state's `prefill_tokens_per_second`); NaN unknown. */
  measuredPrefill: Float64Array;
  prefillBusyUntil: Float64Array;
  instanceIds: (string | null)[];
  /** Replicas (this one included) as of the last peer message: shares new nodes' allowance. */
  private replicas = 1;
  depth: Float64Array;
  gate: Uint8Array;
  rate: Float64Array;
  prefillRate: Float64Array;
  readonly prefixes: PrefixIndex;

  constructor(snapshot: RoutingSnapshot, prefixes?: PrefixIndex) {
    const n = snapshot.nodes.length;
    this.snapshot = snapshot;
    this.status = new Uint8Array(n);
    this.polledDepth = new Float64Array(n);
    this.inFlight = new Float64Array(n);
    this.peerInFlight = new Float64Array(n);
    this.inFlightAtPoll = new Float64Array(n);
    this.burstAllowance = new Float64Array(n).fill(Number.POSITIVE_INFINITY);
    this.healthScore = new Float64Array(n);
    this.cooldownUntil = new Float64Array(n);
    this.attestedUntil = new Float64Array(n);
    this.latencyEwmaMs = new Float64Array(n).fill(Number.NaN);
    this.tokensPerSecond = new Float64Array(n).fill(Number.NaN);
    this.capacityTps = new Float64Array(n).fill(Number.NaN);
    this.recentPeak = new Float64Array(n);
    this.lastCompletionAt = new Float64Array(n).fill(Number.NEGATIVE_INFINITY);
    this.instanceIds = new Array<string | null>(n).fill(null);
    this.depth = new Float64Array(n);
    this.gate = new Uint8Array(n);
    this.rate = new Float64Array(n);
    this.measuredPrefill = new Float64Array(n).fill(Number.NaN);
    this.prefillBusyUntil = new Float64Array(n);
    this.prefillRate = new Float64Array(n);
    this.prefixes = prefixes ?? new PrefixIndex(n, snapshot.options.defaultKvCacheTokens);
    this.refreshAll();
  }

  /** Recomputes the derived fields of node `i` ({@link LiveTable.depth}, `gate`, `rate`). */
  private refresh(i: number): void {
    const depth = effectiveDepth(this, i);
    this.depth[i] = depth;
    const status = this.status[i]!;
    if (status === LIVE_STATUS.unknown) this.gate[i] = GATE.noState;
    else if (status !== LIVE_STATUS.active) this.gate[i] = GATE.notActive;
    else if (!(depth < this.snapshot.maxConcurrency[i]!) || !(this.burstAllowance[i]! >= 1)) {
      this.gate[i] = GATE.full;
    } else this.gate[i] = GATE.open;
    // Capacity first (what the node sustains when full); the served rate only when no poll
    // has found it generating yet.
    const capacity = this.capacityTps[i]!;
    const tps = capacity > 0 && capacity < Infinity ? capacity : this.tokensPerSecond[i]!;
    this.rate[i] = tps > 0 && tps < Infinity ? Math.max(tps, MIN_TPS) : Number.NaN;
    const measured = this.measuredPrefill[i]!;
    this.prefillRate[i] =
      measured === measured
        ? measured
        : (this.snapshot.nodes[i]!.spec.prefill_tokens_per_second ?? Number.NaN);
  }

  private refreshAll(): void {
    for (let i = 0; i < this.status.length; i++) this.refresh(i);
  }

  private at(nodeId: string): number {
    return this.snapshot.nodeIndex.get(nodeId) ?? -1;
  }

  applyState(state: NodeState): boolean {
    const i = this.at(state.node_id);
    if (i < 0) return false;
    const usable = state.status === "Active" && !state.probe_pending;
    this.status[i] = usable ? LIVE_STATUS.active : LIVE_STATUS.inactive;
    this.polledDepth[i] = Math.max(0, finiteOr(state.queue_depth, 0));
    this.healthScore[i] = Math.min(100, Math.max(0, finiteOr(state.health_score, 0)));
    // A request that finished after the probe ran (`checked_at`) may still be in its depth:
    // then the baseline is the highest total of the spell, not the total now.
    const total = this.inFlight[i]! + this.peerInFlight[i]!;
    const finishedSinceProbe =
      this.lastCompletionAt[i]! >= finiteOr(state.checked_at, 0) - POLL_SLACK_MS;
    this.inFlightAtPoll[i] = finishedSinceProbe ? Math.max(total, this.recentPeak[i]!) : total;
    if (state.instance_id !== null && state.instance_id !== this.instanceIds[i]) {
      if (this.instanceIds[i] !== null) {
        this.tokensPerSecond[i] = Number.NaN;
        this.capacityTps[i] = Number.NaN;
        this.latencyEwmaMs[i] = Number.NaN;
        // A new instance starts with an empty cache.
        this.prefixes.forget(state.node_id);
      }
      this.instanceIds[i] = state.instance_id;
    }
    this.applyCacheState(i, state);
    const slots = Math.max(1, this.snapshot.maxConcurrency[i]!);
    const perRequest = state.request_tokens_per_second;
    const tps = state.tokens_per_second;
    const served = tps !== null && tps > 0 && Number.isFinite(tps);
    if (served) this.tokensPerSecond[i] = tps;
    if (perRequest !== null && perRequest > 0 && Number.isFinite(perRequest)) {
      // Measured per request (already smoothed by the aggregator): true however little
      // traffic the node gets.
      this.capacityTps[i] = perRequest * slots;
    } else if (served) {
      // Without a time-per-token histogram: served rate ÷ requests running at the poll. The
      // rate is averaged over the poll interval and `running` is not, so a node that gets
      // little traffic can look slower than it is.
      const running = finiteOr(state.running, 0);
      if (running > 0) {
        const sample = (tps / running) * slots;
        const prior = this.capacityTps[i]!;
        this.capacityTps[i] = Number.isNaN(prior)
          ? sample
          : prior + CAPACITY_ALPHA * (sample - prior);
      }
    }
    const latency = state.latency_ewma_ms;
    if (latency !== null && latency >= 0 && Number.isFinite(latency)) {
      this.latencyEwmaMs[i] = latency;
    }
    this.refresh(i);
    return true;
  }

  /** The prefix-cache fields of a state (before `refresh`): what the node holds, how fast it prefills. */
  private applyCacheState(i: number, state: NodeState): void {
    const spec = this.snapshot.nodes[i]!.spec;
    const id = spec.id;
    // An isolated node may have restarted without our seeing its new instance.
    if (state.status === "Isolated") this.prefixes.forget(id);
    this.prefixes.setCapacity(
      id,
      i,
      state.kv_cache_capacity_tokens ?? spec.kv_cache_tokens ?? null,
    );
    const prefill = state.prefill_tokens_per_second;
    if (prefill !== null && prefill > 0 && Number.isFinite(prefill)) {
      this.measuredPrefill[i] = prefill;
    }
    const hitRate = state.prefix_cache_hit_rate;
    if (hitRate !== null && hitRate >= 0 && hitRate <= 1) this.prefixes.observeHitRate(id, hitRate);
  }

  recordPrefix(
    nodeId: string,
    prefix: PromptPrefix,
    own?: { expectedBlocks: number; now: number },
  ): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.prefixes.record(
      nodeId,
      i,
      prefix.digests,
      own && { expectedBlocks: own.expectedBlocks, promptChars: prefix.chars },
    );
    if (own !== undefined) {
      const rate = this.prefillRate[i]!;
      const ms = prefillMsFrom(
        tokensOfChars(prefix.chars),
        tokensOfChars(own.expectedBlocks * PREFIX_BLOCK_CHARS),
        rate === rate ? rate : this.snapshot.options.defaultPrefillTokensPerSecond,
      );
      if (ms > 0) this.prefillBusyUntil[i] = Math.max(this.prefillBusyUntil[i]!, own.now) + ms;
    }
    return true;
  }

  clearState(nodeId: string): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.status[i] = LIVE_STATUS.unknown;
    this.polledDepth[i] = 0;
    this.healthScore[i] = 0;
    this.refresh(i);
    return true;
  }

  dispatched(nodeId: string): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.inFlight[i]! += 1;
    this.burstAllowance[i]! -= 1;
    this.refresh(i);
    return true;
  }

  completed(nodeId: string, now = Number.NaN): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    if (this.inFlight[i]! <= 0) return true;
    this.notePeak(i, this.inFlight[i]! + this.peerInFlight[i]!, now);
    // The slot is free now, before the next poll says so: the effective depth drops at
    // once (a node that finished is routable at once), and the slot was this replica's,
    // so taking it again cannot collide with a peer.
    this.inFlight[i]! -= 1;
    this.burstAllowance[i]! += 1;
    this.refresh(i);
    return true;
  }

  setPeerInFlight(
    counts: ReadonlyMap<string, number>,
    replicas: number,
    fresh: boolean,
    now = Number.NaN,
  ): void {
    const n = this.snapshot.nodes.length;
    const peer = this.peerInFlight;
    const before = Float64Array.from(peer);
    peer.fill(0);
    for (const [nodeId, count] of counts) {
      const i = this.at(nodeId);
      if (i >= 0 && count > 0 && Number.isFinite(count)) peer[i] = count;
    }
    // A peer's completions, like ours, may still be in the next poll.
    for (let i = 0; i < n; i++) {
      if (peer[i]! < before[i]!) this.notePeak(i, this.inFlight[i]! + before[i]!, now);
    }
    this.replicas = replicas;
    const allowance = this.burstAllowance;
    for (let i = 0; i < n; i++) {
      const share = this.fairShare(i);
      allowance[i] = fresh ? share : Math.min(allowance[i]!, share);
    }
    this.refreshAll();
  }

  /** This replica's share of node `i`'s free slots; unlimited when it is alone. */
  private fairShare(i: number): number {
    if (this.replicas <= 1) return Number.POSITIVE_INFINITY;
    const free = Math.max(0, this.snapshot.maxConcurrency[i]! - effectiveDepth(this, i));
    return Math.ceil(free / this.replicas);
  }

  private notePeak(i: number, totalBefore: number, now: number): void {
    if (Number.isNaN(now)) return;
    const sameSpell = now - this.lastCompletionAt[i]! <= COMPLETION_SPELL_MS;
    this.recentPeak[i] = sameSpell ? Math.max(this.recentPeak[i]!, totalBefore) : totalBefore;
    this.lastCompletionAt[i] = now;
  }

  coolDown(nodeId: string, untilMs: number): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.cooldownUntil[i] = Math.max(this.cooldownUntil[i]!, finiteOr(untilMs, 0));
    return true;
  }

  setAttestedUntil(nodeId: string, untilMs: number): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.attestedUntil[i] = finiteOr(untilMs, 0);
    return true;
  }

  observeLatency(nodeId: string, latencyMs: number): boolean {
    const i = this.at(nodeId);
    if (i < 0 || !Number.isFinite(latencyMs) || latencyMs < 0) return false;
    const prior = this.latencyEwmaMs[i]!;
    const alpha = this.snapshot.options.latencyEwmaAlpha;
    this.latencyEwmaMs[i] = Number.isNaN(prior) ? latencyMs : prior + alpha * (latencyMs - prior);
    return true;
  }

  setTokensPerSecond(nodeId: string, tokensPerSecond: number): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.tokensPerSecond[i] =
      Number.isFinite(tokensPerSecond) && tokensPerSecond > 0 ? tokensPerSecond : Number.NaN;
    this.refresh(i);
    return true;
  }

  queueDepth(nodeId: string): number | undefined {
    const i = this.at(nodeId);
    return i < 0 ? undefined : effectiveDepth(this, i);
  }

  rebind(snapshot: RoutingSnapshot): void {
    if (snapshot === this.snapshot) return;
    this.prefixes.rebind(snapshot.nodeIndex);
    const next = new Table(snapshot, this.prefixes);
    const added: number[] = [];
    for (const entry of snapshot.nodes) {
      const old = this.at(entry.spec.id);
      if (old < 0) {
        added.push(entry.index);
        continue;
      }
      for (const field of FIELDS) next[field][entry.index] = this[field][old]!;
      next.instanceIds[entry.index] = this.instanceIds[old]!;
    }
    this.snapshot = snapshot;
    this.instanceIds = next.instanceIds;
    for (const field of FIELDS)
      (this as Record<(typeof FIELDS)[number], unknown>)[field] = next[field];
    this.depth = next.depth;
    this.gate = next.gate;
    this.rate = next.rate;
    this.prefillRate = next.prefillRate;
    // A node new to this replica gets its share at once, not an unlimited allowance until the
    // next peer message: the peers may be filling it too (overshoot 2x the limit, seen in CI).
    for (const i of added) this.burstAllowance[i] = this.fairShare(i);
    this.refreshAll();
  }
}

/**
 * The node's depth now: the polled depth corrected by what every replica dispatched and
 * completed since that poll, and never below what all replicas have in flight (requests in
 * transit at poll time are in neither). A completion lowers it at once.
 */
export function effectiveDepth(live: LiveTable, i: number): number {
  const total = live.inFlight[i]! + live.peerInFlight[i]!;
  return Math.max(total, live.polledDepth[i]! + total - live.inFlightAtPoll[i]!);
}

/** Creates an empty live table for `snapshot`: no node has state, attestation or history. */
export function createLiveTable(snapshot: RoutingSnapshot): LiveTable {
  return new Table(snapshot);
}
