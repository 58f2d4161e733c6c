import { ATTESTATION_RESULTS_BUCKET } from "./attestation.ts";
import { JOB_STATUS_BUCKET } from "./batch.ts";
import { SESSIONS_BUCKET } from "./sessions.ts";
import { KV_BUCKETS } from "./subjects.ts";

/** The configuration buckets operators manage (through the admin identity only). */
export const CONFIG_BUCKETS = [
  KV_BUCKETS.nodes,
  KV_BUCKETS.models,
  KV_BUCKETS.policies,
  KV_BUCKETS.accounts,
  KV_BUCKETS.cloudAccounts,
  KV_BUCKETS.costs,
  KV_BUCKETS.qualityScores,
  KV_BUCKETS.measurements,
  KV_BUCKETS.revocations,
] as const;

/** Every KV bucket of the system, configuration and service-owned state alike. */
export const ALL_KV_BUCKETS: readonly string[] = [
  ...CONFIG_BUCKETS,
  KV_BUCKETS.nodeState,
  KV_BUCKETS.aggregators,
  ATTESTATION_RESULTS_BUCKET,
  SESSIONS_BUCKET,
  JOB_STATUS_BUCKET,
];
