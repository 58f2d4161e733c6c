import { watchBucket } from "@zml/bus";
import type { Bus, BusLogger, KvMap } from "@zml/bus";
import {
  ATTESTATION_RESULTS_BUCKET,
  AccountSpecSchema,
  AttestationResultSchema,
  KV_BUCKETS,
  ModelSpecSchema,
  NodeSpecSchema,
  NodeStateSchema,
  PolicySpecSchema,
  RevocationSchema,
} from "@zml/contracts";
import type {
  AccountSpec,
  AttestationResult,
  ModelSpec,
  NodeSpec,
  NodeState,
  PolicySpec,
  Revocation,
} from "@zml/contracts";
import { CostEntrySchema, QualityScoreSchema } from "@zml/routing";
import type { CostEntry, QualityScore } from "@zml/routing";

/** Everything the dispatcher reads from KV, mirrored in memory before it serves. */
export interface DispatcherState {
  nodes: KvMap<NodeSpec>;
  models: KvMap<ModelSpec>;
  policies: KvMap<PolicySpec>;
  costs: KvMap<CostEntry>;
  quality: KvMap<QualityScore>;
  nodeStates: KvMap<NodeState>;
  accounts: KvMap<AccountSpec>;
  attestations: KvMap<AttestationResult>;
  revocations: KvMap<Revocation>;
  stop(): void;
}

/** Watches every bucket the dispatcher reads; resolves once all are loaded. */
export async function watchDispatcherState(bus: Bus, log: BusLogger): Promise<DispatcherState> {
  const [nodes, models, policies, costs, quality, nodeStates, accounts, attestations, revocations] =
    await allOrNone([
      watchBucket(bus, KV_BUCKETS.nodes, { schema: NodeSpecSchema, log }),
      watchBucket(bus, KV_BUCKETS.models, { schema: ModelSpecSchema, log }),
      watchBucket(bus, KV_BUCKETS.policies, { schema: PolicySpecSchema, log }),
      watchBucket(bus, KV_BUCKETS.costs, { schema: CostEntrySchema, log }),
      watchBucket(bus, KV_BUCKETS.qualityScores, { schema: QualityScoreSchema, log }),
      watchBucket(bus, KV_BUCKETS.nodeState, { schema: NodeStateSchema, log }),
      watchBucket(bus, KV_BUCKETS.accounts, { schema: AccountSpecSchema, log }),
      watchBucket(bus, ATTESTATION_RESULTS_BUCKET, { schema: AttestationResultSchema, log }),
      watchBucket(bus, KV_BUCKETS.revocations, { schema: RevocationSchema, log }),
    ]);
  const watched = {
    nodes,
    models,
    policies,
    costs,
    quality,
    nodeStates,
    accounts,
    attestations,
    revocations,
  };
  return { ...watched, stop: () => Object.values(watched).forEach((w) => w.stop()) };
}

/**
 * Like `Promise.all` for watches, but when one fails the others that loaded are stopped: a
 * start that is tried again (JetStream was away) leaves no watch of the failed try behind.
 */
async function allOrNone<T extends readonly Promise<{ stop(): void }>[]>(
  watches: [...T],
): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
  const settled = await Promise.allSettled(watches);
  const failed = settled.find((r) => r.status === "rejected");
  if (failed) {
    for (const r of settled) if (r.status === "fulfilled") r.value.stop();
    throw (failed as PromiseRejectedResult).reason;
  }
  return settled.map((r) => (r as PromiseFulfilledResult<{ stop(): void }>).value) as {
    -readonly [K in keyof T]: Awaited<T[K]>;
  };
}
