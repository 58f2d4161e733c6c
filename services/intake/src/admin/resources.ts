import {
  AccountSpecSchema,
  ApprovedMeasurementSchema,
  CloudAccountSpecSchema,
  ConfigKeySchema,
  CostEntrySchema,
  KV_BUCKETS,
  MODEL_ID_PATTERN,
  ModelSpecSchema,
  NODE_ID_PATTERN,
  NodeSpecSchema,
  NodeStateSchema,
  PolicySpecSchema,
  QualityScoreSchema,
  RevocationSchema,
  NODE_ADDRESS_RULES,
  ZmlError,
  endpointProblem,
} from "@zml/contracts";
import type { ErrorCode, NodeAddressPolicy } from "@zml/contracts";
import { costEntryStatus, DEFAULT_ROUTING_OPTIONS } from "@zml/routing";
import { z } from "zod";
import type { ConfigStore, StoredDoc } from "./store.ts";

/** What a resource's hooks may consult. */
export interface ResourceContext {
  now: number;
  store: ConfigStore;
  /** The document currently stored under the key, if any. */
  existing: StoredDoc | undefined;
  nodeAddresses: NodeAddressPolicy;
}

/** One kind of configuration document the admin API manages. */
export interface AdminResource {
  /** The URL segment: `/admin/v1/<kind>/<key>`. */
  kind: string;
  bucket: string;
  schema: z.ZodType;
  /** Its document's name in the OpenAPI document (`NodeSpec`; put as `NodeSpecInput`). */
  component: string;
  /** Validates the key in the path. */
  key: z.ZodType<string>;
  /** Field of the document that must equal the key; filled from the key when omitted. */
  idField: "id" | "name" | undefined;
  /** Fills server-side defaults (timestamps, registration order) before validation. */
  prepare?: (doc: Record<string, unknown>, ctx: ResourceContext) => Promise<void> | void;
  /** Derived facts shown beside a stored document (e.g. a price's age); pure. */
  status?: (doc: unknown, now: number) => unknown;
  /** Cross-document checks after validation; throws ZmlError naming the field. */
  check?: (doc: Record<string, unknown>, ctx: ResourceContext) => Promise<void>;
  /** The codes `check` throws, for the API's documentation (openapi/operation-errors.ts). */
  answers?: readonly ErrorCode[];
  /**
   * Where the live state of each document is published (a bucket keyed alike) and what of it
   * the API shows beside the document as `state`; `null` when none is published yet.
   */
  live?: { bucket: string; view: (value: unknown) => unknown };
}

/**
 * A node's health as the aggregator last published it: what an operator needs to see why a
 * node is not taking traffic, its last probe failure first.
 */
function nodeStateView(value: unknown): unknown {
  const parsed = NodeStateSchema.safeParse(value);
  if (!parsed.success) return null;
  const s = parsed.data;
  return {
    status: s.status,
    probe_pending: s.probe_pending,
    last_error: s.last_error,
    consecutive_failures: s.consecutive_failures,
    health_score: s.health_score,
    queue_depth: s.queue_depth,
    checked_at: s.checked_at,
    last_ok_at: s.last_ok_at,
  };
}

const NodeId = z.string().regex(NODE_ID_PATTERN, "letters, digits, '-' and '_', at most 64");
const ModelId = z.string().max(256).regex(MODEL_ID_PATTERN, "not a valid model id");

const defaultNow =
  (field: string, when: (doc: Record<string, unknown>) => boolean = () => true) =>
  (doc: Record<string, unknown>, ctx: ResourceContext) => {
    if (doc[field] === undefined && when(doc)) doc[field] = ctx.now;
  };

/** A default policy must name an existing policy (or the built-in `balanced`). */
async function checkDefaultPolicy(doc: Record<string, unknown>, ctx: ResourceContext) {
  const name = doc.default_policy;
  if (typeof name !== "string" || name === "balanced") return;
  if (!(await ctx.store.get(KV_BUCKETS.policies, name))) {
    throw new ZmlError("unknown_policy", `unknown policy '${name}'`, { param: "default_policy" });
  }
}

/**
 * A new node goes after every registered one (registration order orders the default
 * policy chain); an updated node keeps its place.
 */
async function registrationOrder(doc: Record<string, unknown>, ctx: ResourceContext) {
  if (doc.registered_at !== undefined) return;
  if (ctx.existing) {
    const prev = JSON.parse(ctx.existing.value) as { registered_at?: unknown };
    doc.registered_at = prev.registered_at ?? 0;
    return;
  }
  let max = -1;
  for (const d of await ctx.store.list(KV_BUCKETS.nodes)) {
    const at = (JSON.parse(d.value) as { registered_at?: unknown }).registered_at;
    if (typeof at === "number" && at > max) max = at;
  }
  doc.registered_at = max + 1;
}

/** What {@link checkNodeEndpoint} answers: a bad URL, or each rule of the address policy. */
const ENDPOINT_CODES: readonly ErrorCode[] = [
  "invalid_request",
  ...Object.values(NODE_ADDRESS_RULES),
];

/** A node may not be registered at an address the operator's policy refuses. */
function checkNodeEndpoint(doc: Record<string, unknown>, ctx: ResourceContext): Promise<void> {
  const problem = endpointProblem(String(doc.endpoint), ctx.nodeAddresses);
  if (problem === undefined) return Promise.resolve();
  return Promise.reject(
    new ZmlError(problem.code, `invalid 'endpoint': ${problem.message}`, { param: "endpoint" }),
  );
}

export const ADMIN_RESOURCES: readonly AdminResource[] = [
  {
    kind: "nodes",
    bucket: KV_BUCKETS.nodes,
    schema: NodeSpecSchema,
    component: "NodeSpec",
    key: NodeId,
    idField: "id",
    prepare: registrationOrder,
    check: checkNodeEndpoint,
    answers: ENDPOINT_CODES,
    live: { bucket: KV_BUCKETS.nodeState, view: nodeStateView },
  },
  {
    kind: "models",
    bucket: KV_BUCKETS.models,
    schema: ModelSpecSchema,
    component: "ModelSpec",
    key: ModelId,
    idField: "id",
    check: checkDefaultPolicy,
    answers: ["unknown_policy"],
  },
  {
    kind: "policies",
    bucket: KV_BUCKETS.policies,
    schema: PolicySpecSchema,
    component: "PolicySpec",
    key: NodeId,
    idField: "name",
  },
  {
    kind: "accounts",
    bucket: KV_BUCKETS.accounts,
    schema: AccountSpecSchema,
    component: "AccountSpec",
    key: NodeId,
    idField: "id",
    check: checkDefaultPolicy,
    answers: ["unknown_policy"],
  },
  {
    // References to credentials only (profile, role, file path): never the secrets.
    kind: "cloud-accounts",
    bucket: KV_BUCKETS.cloudAccounts,
    schema: CloudAccountSpecSchema,
    component: "CloudAccountSpec",
    key: NodeId,
    idField: "id",
  },
  {
    kind: "costs",
    bucket: KV_BUCKETS.costs,
    schema: CostEntrySchema,
    component: "CostEntry",
    key: ConfigKeySchema,
    idField: undefined,
    prepare: defaultNow("updated_at", (d) => d.kind === "cloud_spot"),
    // Source, age and staleness by the rule routing applies (libs/routing price.ts).
    status: (doc, now) => {
      const entry = CostEntrySchema.safeParse(doc);
      return entry.success
        ? costEntryStatus(entry.data, now, DEFAULT_ROUTING_OPTIONS.spotPriceMaxAgeMs)
        : undefined;
    },
  },
  {
    kind: "quality-scores",
    bucket: KV_BUCKETS.qualityScores,
    schema: QualityScoreSchema,
    component: "QualityScore",
    key: ConfigKeySchema,
    idField: undefined,
    prepare: defaultNow("updated_at"),
  },
  {
    kind: "measurements",
    bucket: KV_BUCKETS.measurements,
    schema: ApprovedMeasurementSchema,
    component: "ApprovedMeasurement",
    key: NodeId,
    idField: "id",
    check: async (doc, ctx) => {
      if (!(await ctx.store.get(KV_BUCKETS.models, String(doc.model)))) {
        throw new ZmlError("unknown_model", `model '${String(doc.model)}' does not exist`, {
          param: "model",
        });
      }
    },
    answers: ["unknown_model"],
  },
  {
    kind: "revocations",
    bucket: KV_BUCKETS.revocations,
    schema: RevocationSchema,
    component: "Revocation",
    key: NodeId,
    idField: "id",
    prepare: defaultNow("revoked_at"),
  },
];

/** PascalCase of a kind, for operation ids: `quality-scores` → `QualityScores`. */
export const pascal = (kind: string) =>
  kind.replace(/(^|-)([a-z])/g, (_m, _dash: string, c: string) => c.toUpperCase());

export function findResource(kind: string): AdminResource | undefined {
  return ADMIN_RESOURCES.find((r) => r.kind === kind);
}
