// The protocol between the routing-quality coordinator and its client process: one JSON plan
// per stdin line, one JSON result per stdout line, in order.
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
  durationS: number;
  ratePerS: number;
  model: string;
  target: QualityTarget;
  /** Longest wait for the answers still running once the last request was sent. */
  drainTimeoutMs: number;
}

export interface QualityResult {
  id: number;
  sent: number;
  completed: number;
  failed: number;
  /** A few failure descriptions, for the report. */
  failures: string[];
  /** Request sent → first byte of the stream's body (its first event), in milliseconds. */
  ttftMs: { p50: number; p90: number; p99: number; count: number };
  /** First request sent → last answer ended. */
  elapsedMs: number;
  /**
   * Mean `cached-tokens` of the gateway's `x-zml-routing` answers (its expectation of cached
   * prompt tokens on the chosen node); null when no answer carried it.
   */
  expectedCachedTokens: number | null;
}
