// What the route path is handed (its dependencies and one request) and how a request ends:
// the types every step of `route/` and `session/` shares, kept apart from the code so that no
// step imports another's module for a type.
import type { Bus, ReplyWriter } from "@zml/bus";
import type { NodeState, ZmlError } from "@zml/contracts";
import type { ResolvedPolicy } from "@zml/routing";
import type { Logger } from "@zml/telemetry";
import type { CapacitySignal } from "../capacity/capacity-signal.ts";
import type { InFlightShare } from "../capacity/in-flight-share.ts";
import type { PlacementShare } from "../capacity/placement-share.ts";
import type { ObservationBatcher } from "../capacity/observation-batcher.ts";
import type { DispatcherConfig } from "../config.ts";
import type { RoutingState } from "../fleet/routing-state.ts";
import type { DispatcherMetrics } from "../metrics.ts";
import type { AttestationGate } from "../node/attestation-gate.ts";
import type { NodePools } from "../node/node-pools.ts";
import type { SessionStore } from "../session/session-store.ts";
import type { RoutedRequest } from "./route-headers.ts";

export interface ExecuteDeps {
  bus: Bus;
  routing: RoutingState;
  pools: NodePools;
  capacity: CapacitySignal;
  /** Tells the other replicas of each dispatch and completion; absent when alone. */
  inFlightShare?: InFlightShare;
  /** Tells the other replicas where each prompt prefix went (prefix affinity). */
  placements?: PlacementShare;
  attestation: AttestationGate;
  /** Dispatch outcomes for the health aggregator, sent in per-node batches. */
  observations: ObservationBatcher;
  /** Tier-4 sessions: a request with a session id goes to its session's node only. */
  sessions: SessionStore;
  /** Latest node states (a session node's instance id). */
  states: ReadonlyMap<string, NodeState>;
  /** Secrets by reference, for nodes whose spec names an `auth.secret_ref`. */
  secrets: ReadonlyMap<string, string>;
  config: Pick<
    DispatcherConfig,
    | "DISPATCH_HEADERS_TIMEOUT_MS"
    | "DISPATCH_BODY_IDLE_TIMEOUT_MS"
    | "DISPATCH_MAX_ANSWER_BYTES"
    | "NODE_COOLDOWN_MS"
  >;
  log: Logger;
  metrics: DispatcherMetrics;
  clock: () => number;
  random: () => number;
}

export interface Execution {
  request: RoutedRequest;
  body: Uint8Array;
  writer: ReplyWriter;
  cancelled: AbortSignal;
  /**
   * Whether a saturated fleet is waited out here, per the policy's `queue_on_saturation`
   * (sync requests), or reported at once so the caller can wait elsewhere (batch jobs wait
   * in JetStream).
   */
  waitForCapacity: boolean;
  /** Called when the first attempt's payload is about to go to a node. */
  onDispatched?: () => void;
  /** Names the trace span for a batch job instead of a sync request. */
  batchJob?: boolean;
}

/** How a request ended. Every outcome except `cancelled` has been written to the writer. */
export type ExecutionResult =
  | { kind: "relayed" | "broken"; status: number; attempts: number; routing: string }
  | { kind: "rejected"; error: ZmlError; saturated: boolean; policy: ResolvedPolicy | null }
  | { kind: "failed"; error: ZmlError; attempts: number }
  | { kind: "cancelled" };
