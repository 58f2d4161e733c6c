import type { NodeState } from "@zml/contracts";
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
  /** `inFlight` when the last poll arrived; requests sent since are not in `polledDepth`. */
  readonly inFlightAtPoll: Float64Array;
  readonly healthScore: Float64Array;
  /** Epoch ms until which the node is cooling down; 0 when it is not. */
  readonly cooldownUntil: Float64Array;
  /** Epoch ms until which the node's attestation is valid; 0 when it has none. */
  readonly attestedUntil: Float64Array;
  /** Observed response-time EWMA; NaN before the first observation. */
  readonly latencyEwmaMs: Float64Array;
  /** Historical tokens per second; NaN when unknown. */
  readonly tokensPerSecond: Float64Array;

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
  /** Counts a request to the node as finished, however it ended. */
  completed(nodeId: string): boolean;
  coolDown(nodeId: string, untilMs: number): boolean;
  /** Records a verified attestation valid until `untilMs`; 0 (or a past time) revokes it. */
  setAttestedUntil(nodeId: string, untilMs: number): boolean;
  /** Folds one observed response time into the node's EWMA. */
  observeLatency(nodeId: string, latencyMs: number): boolean;
  setTokensPerSecond(nodeId: string, tokensPerSecond: number): boolean;
  /** Effective queue depth: polled depth plus requests sent since that poll. */
  queueDepth(nodeId: string): number | undefined;
  /** Switches to a new snapshot, carrying every known value over by node id. */
  rebind(snapshot: RoutingSnapshot): void;
}

const FIELDS = [
  "status",
  "polledDepth",
  "inFlight",
  "inFlightAtPoll",
  "healthScore",
  "cooldownUntil",
  "attestedUntil",
  "latencyEwmaMs",
  "tokensPerSecond",
] as const;

const finiteOr = (value: number, fallback: number): number =>
  Number.isFinite(value) ? value : fallback;

class Table implements LiveTable {
  snapshot: RoutingSnapshot;
  status: Uint8Array;
  polledDepth: Float64Array;
  inFlight: Float64Array;
  inFlightAtPoll: Float64Array;
  healthScore: Float64Array;
  cooldownUntil: Float64Array;
  attestedUntil: Float64Array;
  latencyEwmaMs: Float64Array;
  tokensPerSecond: Float64Array;
  instanceIds: (string | null)[];

  constructor(snapshot: RoutingSnapshot) {
    const n = snapshot.nodes.length;
    this.snapshot = snapshot;
    this.status = new Uint8Array(n);
    this.polledDepth = new Float64Array(n);
    this.inFlight = new Float64Array(n);
    this.inFlightAtPoll = new Float64Array(n);
    this.healthScore = new Float64Array(n);
    this.cooldownUntil = new Float64Array(n);
    this.attestedUntil = new Float64Array(n);
    this.latencyEwmaMs = new Float64Array(n).fill(Number.NaN);
    this.tokensPerSecond = new Float64Array(n).fill(Number.NaN);
    this.instanceIds = new Array<string | null>(n).fill(null);
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
    this.inFlightAtPoll[i] = this.inFlight[i]!;
    if (state.instance_id !== null && state.instance_id !== this.instanceIds[i]) {
      if (this.instanceIds[i] !== null) {
        this.tokensPerSecond[i] = Number.NaN;
        this.latencyEwmaMs[i] = Number.NaN;
      }
      this.instanceIds[i] = state.instance_id;
    }
    const tps = state.tokens_per_second;
    if (tps !== null && tps > 0 && Number.isFinite(tps)) this.tokensPerSecond[i] = tps;
    const latency = state.latency_ewma_ms;
    if (latency !== null && latency >= 0 && Number.isFinite(latency)) {
      this.latencyEwmaMs[i] = latency;
    }
    return true;
  }

  clearState(nodeId: string): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.status[i] = LIVE_STATUS.unknown;
    this.polledDepth[i] = 0;
    this.healthScore[i] = 0;
    return true;
  }

  dispatched(nodeId: string): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.inFlight[i]! += 1;
    return true;
  }

  completed(nodeId: string): boolean {
    const i = this.at(nodeId);
    if (i < 0) return false;
    this.inFlight[i] = Math.max(0, this.inFlight[i]! - 1);
    // Requests finish roughly in the order they were sent, so the one that ended is taken
    // to be one the last poll already counted: requests sent after the poll stay visible.
    this.inFlightAtPoll[i] = Math.max(0, this.inFlightAtPoll[i]! - 1);
    return true;
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
    return true;
  }

  queueDepth(nodeId: string): number | undefined {
    const i = this.at(nodeId);
    return i < 0 ? undefined : effectiveDepth(this, i);
  }

  rebind(snapshot: RoutingSnapshot): void {
    if (snapshot === this.snapshot) return;
    const next = new Table(snapshot);
    for (const entry of snapshot.nodes) {
      const old = this.at(entry.spec.id);
      if (old < 0) continue;
      for (const field of FIELDS) next[field][entry.index] = this[field][old]!;
      next.instanceIds[entry.index] = this.instanceIds[old]!;
    }
    this.snapshot = snapshot;
    this.instanceIds = next.instanceIds;
    for (const field of FIELDS)
      (this as Record<(typeof FIELDS)[number], unknown>)[field] = next[field];
  }
}

/**
 * Polled depth plus the requests this dispatcher sent after that poll, and never below this
 * dispatcher's own in-flight count (requests in transit at poll time are in neither).
 */
export function effectiveDepth(live: LiveTable, i: number): number {
  return Math.max(
    live.inFlight[i]!,
    live.polledDepth[i]! + Math.max(0, live.inFlight[i]! - live.inFlightAtPoll[i]!),
  );
}

/** Creates an empty live table for `snapshot`: no node has state, attestation or history. */
export function createLiveTable(snapshot: RoutingSnapshot): LiveTable {
  return new Table(snapshot);
}
