import type { Bus } from "@zml/bus";
import {
  AccountSpecSchema,
  CloudAccountSpecSchema,
  CostEntrySchema,
  KV_BUCKETS,
  ModelSpecSchema,
  NodeSpecSchema,
  NodeStateSchema,
  PolicySpecSchema,
  REVOCATION_MATCH_FIELDS,
  RevocationSchema,
} from "@zml/contracts";
import type { NodeSpec, NodeState } from "@zml/contracts";
import { costEntryStatus, DEFAULT_ROUTING_OPTIONS } from "@zml/routing";
import { withBus } from "../connect.ts";
import { readBucket } from "../kv-read.ts";
import { parseCommandArgs, UsageError } from "../io.ts";
import type { CliIo } from "../io.ts";
import { formatTable } from "../table.ts";

export const GET_KINDS = [
  "nodes",
  "policies",
  "models",
  "accounts",
  "cloud-accounts",
  "costs",
  "revocations",
] as const;
type Kind = (typeof GET_KINDS)[number];

export const GET_USAGE = `usage: zml get ${GET_KINDS.join("|")} [-o table|json] [--nats <url>]

  nodes        registered nodes with their live state (status, queue depth, health score)
  policies     routing policies, each family of the chain with its active/total nodes
  models       models with their default policy and the nodes serving them
  accounts     accounts, allowed tiers, default policy and rate limit (never keys)
  cloud-accounts  cloud accounts the spot-price feed follows (credential references only)
  costs        the cost table: each price with its source, age and whether it is stale
  revocations  the revocation list
`;

interface View {
  header: string[];
  rows: string[][];
  json: unknown[];
}

/** `zml get`: configuration joined with live node state, from NATS KV. */
export async function runGet(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(args);
  if (values.help) {
    io.stdout(GET_USAGE);
    return 0;
  }
  const kind = positionals[0];
  if (positionals.length !== 1 || !isKind(kind)) {
    throw new UsageError(`expected one of ${GET_KINDS.join(", ")}`);
  }
  const output = values.output ?? "table";
  if (output !== "table" && output !== "json") throw new UsageError("-o must be table or json");
  return withBus(values.nats, io, async (bus) => {
    const view = await VIEWS[kind](bus);
    io.stdout(
      output === "json"
        ? `${JSON.stringify(view.json, null, 2)}\n`
        : view.rows.length === 0
          ? `no ${kind}\n`
          : formatTable(view.header, view.rows),
    );
    return 0;
  });
}

function parse(args: string[]) {
  return parseCommandArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      output: { type: "string", short: "o" },
      nats: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
}

function isKind(value: string | undefined): value is Kind {
  return (GET_KINDS as readonly string[]).includes(value ?? "");
}

async function fleetState(bus: Bus) {
  const [nodes, states] = await Promise.all([
    readBucket(bus, KV_BUCKETS.nodes, NodeSpecSchema),
    readBucket(bus, KV_BUCKETS.nodeState, NodeStateSchema),
  ]);
  const stateOf = new Map(states.map((s) => [s.key, s.value]));
  return nodes.map(({ value: spec }) => ({ spec, state: stateOf.get(spec.id) }));
}

type NodeView = { spec: NodeSpec; state: NodeState | undefined };
const isActive = (n: NodeView) => n.state?.status === "Active" && !n.state.probe_pending;

const VIEWS: Record<Kind, (bus: Bus) => Promise<View>> = {
  async nodes(bus) {
    const nodes = await fleetState(bus);
    return {
      header: [
        "NODE",
        "FAMILY",
        "TIER",
        "STATUS",
        "QUEUE",
        "HEALTH",
        "FRAMEWORK",
        "MODELS",
        "ENDPOINT",
        "PROBLEMS",
      ],
      rows: nodes.map(({ spec, state }) => [
        spec.id,
        spec.accelerator_family,
        String(spec.tier),
        state ? `${state.status}${state.probe_pending ? " (probe pending)" : ""}` : "Unknown",
        state ? `${state.queue_depth}/${spec.max_concurrency}` : "-",
        state ? String(Math.round(state.health_score)) : "-",
        spec.framework,
        spec.models.join(","),
        spec.endpoint,
        // Why the node's last probe failed, in the aggregator's words: the first thing an
        // operator needs when a node is not Active; then registered models its engine refuses
        // (not routed there).
        [
          state?.last_error,
          state && state.unserved_models.length > 0
            ? `not served by its engine, not routed: ${state.unserved_models.join(",")}`
            : undefined,
        ]
          .filter((note): note is string => typeof note === "string" && note !== "")
          .join("; ") || "-",
      ]),
      json: nodes,
    };
  },
  async policies(bus) {
    const [policies, nodes] = await Promise.all([
      readBucket(bus, KV_BUCKETS.policies, PolicySpecSchema),
      fleetState(bus),
    ]);
    const chainOf = (families: string[]) =>
      families.map((family) => {
        const inFamily = nodes.filter((n) => n.spec.accelerator_family === family);
        return { family, active: inFamily.filter(isActive).length, total: inFamily.length };
      });
    const rows = policies.map(({ value: p }) => {
      const chain = chainOf(
        [...p.accelerator_preference].sort((a, b) => a.priority - b.priority).map((f) => f.family),
      );
      return { policy: p, chain };
    });
    return {
      header: ["POLICY", "CHAIN (ACTIVE/TOTAL)", "COST", "LATENCY-TARGET", "QUEUE"],
      rows: rows.map(({ policy: p, chain }) => [
        p.name,
        chain.map((c) => `${c.family} ${c.active}/${c.total}`).join(" > "),
        p.cost_priority,
        `${p.latency_target_ms}ms`,
        p.queue_on_saturation ? `up to ${p.max_queue_ms}ms` : "fail fast",
      ]),
      json: rows,
    };
  },
  async models(bus) {
    const [models, nodes] = await Promise.all([
      readBucket(bus, KV_BUCKETS.models, ModelSpecSchema),
      fleetState(bus),
    ]);
    const rows = models.map(({ value: m }) => {
      const serving = nodes.filter((n) => n.spec.models.includes(m.id));
      return {
        model: m,
        nodes: serving.map((n) => n.spec.id),
        active: serving.filter(isActive).length,
        tiers: [...new Set(serving.map((n) => n.spec.tier))].sort(),
        families: [...new Set(serving.map((n) => n.spec.accelerator_family))].sort(),
      };
    });
    return {
      header: ["MODEL", "DEFAULT-POLICY", "NODES (ACTIVE/TOTAL)", "TIERS", "FAMILIES"],
      rows: rows.map((r) => [
        r.model.id,
        r.model.default_policy ?? "-",
        `${r.active}/${r.nodes.length}`,
        r.tiers.join(",") || "-",
        r.families.join(",") || "-",
      ]),
      json: rows,
    };
  },
  async accounts(bus) {
    const accounts = await readBucket(bus, KV_BUCKETS.accounts, AccountSpecSchema);
    const safe = accounts.map(({ value: a }) => ({
      ...a,
      api_key_sha256: a.api_key_sha256.length,
    }));
    return {
      header: ["ACCOUNT", "TIERS", "DEFAULT-POLICY", "RATE-LIMIT", "KEYS"],
      rows: safe.map((a) => [
        a.id,
        a.allowed_tiers.join(","),
        a.default_policy ?? "-",
        a.rate_limit
          ? `${a.rate_limit.requests_per_minute}/min${a.rate_limit.burst ? ` burst ${a.rate_limit.burst}` : ""}`
          : "-",
        String(a.api_key_sha256),
      ]),
      json: safe,
    };
  },
  async "cloud-accounts"(bus) {
    const list = await readBucket(bus, KV_BUCKETS.cloudAccounts, CloudAccountSpecSchema);
    return {
      header: ["ID", "PROVIDER", "ACCOUNT", "REGIONS", "CREDENTIALS", "REFRESH", "MAX-AGE"],
      rows: list.map(({ value: a }) => [
        a.id,
        a.provider,
        a.account_id,
        a.regions.join(","),
        a.credentials.kind,
        `${a.refresh_interval_s}s`,
        `${a.max_price_age_s}s`,
      ]),
      json: list.map((a) => a.value),
    };
  },
  async costs(bus) {
    const list = await readBucket(bus, KV_BUCKETS.costs, CostEntrySchema);
    const now = Date.now();
    // The same rule routing ages prices by (libs/routing price.ts), so this shows what it sees.
    const rows = list.map(({ key, value }) => ({
      key,
      entry: value,
      status: costEntryStatus(value, now, DEFAULT_ROUTING_OPTIONS.spotPriceMaxAgeMs),
    }));
    return {
      header: ["KEY", "KIND", "SCOPE", "USD/GPU-H", "GPUS", "SOURCE", "AGE", "STALE"],
      rows: rows.map(({ key, entry, status }) => [
        key,
        entry.kind,
        entry.kind === "cloud_spot"
          ? `${entry.cloud_account}: ${entry.nodes.join(",")}`
          : (entry.node_id ?? `family ${entry.family}`),
        String(entry.usd_per_gpu_hour),
        String(entry.gpus_per_node),
        status.source,
        status.age_s === null ? "-" : `${status.age_s}s/${status.max_age_s}s`,
        status.stale ? "yes (fallback rate used)" : "no",
      ]),
      json: rows.map(({ key, entry, status }) => ({ key, document: entry, status })),
    };
  },
  async revocations(bus) {
    const list = await readBucket(bus, KV_BUCKETS.revocations, RevocationSchema);
    return {
      header: ["ID", "MATCH", "REVOKED-AT", "REASON"],
      rows: list.map(({ value: r }) => [
        r.id,
        REVOCATION_MATCH_FIELDS.filter((f) => r[f] !== undefined)
          .map((f) => `${f}=${r[f]}`)
          .join(" "),
        new Date(r.revoked_at).toISOString(),
        r.reason,
      ]),
      json: list.map((r) => r.value),
    };
  },
};
