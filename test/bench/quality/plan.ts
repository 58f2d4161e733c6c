// The protocol between the routing-quality coordinator and its client process: one JSON plan
// per stdin line, one JSON result per stdout line, in order.
import type { NodeCounters } from "./node-counters.ts";
import type { WorkloadKey } from "./workloads.ts";

/** Where the client sends: through the gateway, or straight to the nodes. */
export type QualityTarget =
  | { kind: "gateway"; url: string; apiKey: string }
  | {
      kind: "direct";
      urls: string[];
      /**
       * `random`: a node drawn uniformly (seeded) per request; `tenant-hash`: the node the
       * request's tenant (or conversation) hashes to, as a client-side affinity would.
       */
      pick: "random" | "tenant-hash";
    };

export interface QualityPlan {
  id: number;
  workload: WorkloadKey;
  seed: number;
  /** Goes into every prompt (see `generateRequests`): each side's prefixes are its own. */
  salt: string;
  /**
   * Seconds of the schedule sent before measuring: their requests warm the caches (from
   * cold) and are not in the figures. Then `durationS` seconds are measured.
   */
  warmupS: number;
  durationS: number;
  ratePerS: number;
  model: string;
  target: QualityTarget;
  /** Longest wait for the answers still running once the last request was sent. */
  drainTimeoutMs: number;
  /** The nodes' base URLs: their `/metrics` are read when measuring starts and at the end. */
  nodeUrls: string[];
}

export interface QualityResult {
  id: number;
  /** Measured requests (warm-up ones excluded), and of those, the ones answered in full. */
  sent: number;
  completed: number;
  /** Failed requests, warm-up ones included. */
  failed: number;
  /** A few failure descriptions, for the report. */
  failures: string[];
  /** Request sent → first byte of the stream's body (its first event), in milliseconds. */
  ttftMs: { p50: number; p90: number; p99: number; count: number };
  /** Measuring started → last measured answer ended. */
  elapsedMs: number;
  /**
   * Each node's counters when measuring started, and once every answer had ended: what the
   * nodes counted between the two is the measured window's (requests are counted by the
   * nodes when scheduled, so a warm-up request still queued at the boundary counts in it).
   */
  nodesAtStart: NodeCounters[];
  nodesAtEnd: NodeCounters[];
  /**
   * Mean `cached-tokens` of the gateway's `x-zml-routing` answers (its expectation of cached
   * prompt tokens on the chosen node); null when no answer carried it.
   */
  expectedCachedTokens: number | null;
}
