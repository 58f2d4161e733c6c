import { KV_BUCKETS } from "@zml/contracts";
import type { FleetDocument } from "@zml/contracts";
import { openKv } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";

export type FleetChange = {
  bucket: string;
  key: string;
  action: "create" | "update" | "delete";
};

/** Which document section goes to which bucket, and what its key is. */
const SECTIONS = [
  {
    bucket: KV_BUCKETS.nodes,
    entries: (d: FleetDocument) => d.nodes.map((n) => [n.id, n] as const),
  },
  {
    bucket: KV_BUCKETS.models,
    entries: (d: FleetDocument) => d.models.map((m) => [m.id, m] as const),
  },
  {
    bucket: KV_BUCKETS.policies,
    entries: (d: FleetDocument) => d.policies.map((p) => [p.name, p] as const),
  },
  {
    bucket: KV_BUCKETS.accounts,
    entries: (d: FleetDocument) => d.accounts.map((a) => [a.id, a] as const),
  },
  {
    // References only (profile, role, secret file path): credentials never enter KV.
    bucket: KV_BUCKETS.cloudAccounts,
    entries: (d: FleetDocument) => d.cloud_accounts.map((a) => [a.id, a] as const),
  },
];

/**
 * Computes what applying `desired` over `current` (bucket → key → stored JSON text) changes.
 * Pure. With `prune`, keys absent from the document are deleted; the document is then the
 * whole truth for the buckets it covers.
 */
export function planFleetChanges(
  current: ReadonlyMap<string, ReadonlyMap<string, string>>,
  desired: FleetDocument,
  prune: boolean,
): Array<FleetChange & { value?: string }> {
  const changes: Array<FleetChange & { value?: string }> = [];
  for (const section of SECTIONS) {
    const existing = current.get(section.bucket) ?? new Map<string, string>();
    const wanted = new Map(section.entries(desired).map(([k, v]) => [k, JSON.stringify(v)]));
    for (const [key, value] of wanted) {
      const now = existing.get(key);
      if (now === undefined) changes.push({ bucket: section.bucket, key, action: "create", value });
      else if (now !== value)
        changes.push({ bucket: section.bucket, key, action: "update", value });
    }
    if (prune) {
      for (const key of existing.keys()) {
        if (!wanted.has(key)) changes.push({ bucket: section.bucket, key, action: "delete" });
      }
    }
  }
  return changes;
}

/**
 * Applies a fleet document to the configuration buckets and returns what changed. Applying
 * the same document twice changes nothing the second time. Services watch these buckets, so
 * changes take effect without restarts.
 */
export async function applyFleet(
  bus: Bus,
  doc: FleetDocument,
  options: { prune?: boolean; dryRun?: boolean } = {},
): Promise<FleetChange[]> {
  const kvs = new Map<string, KV>();
  const current = new Map<string, Map<string, string>>();
  for (const { bucket } of SECTIONS) {
    const kv = await openKv(bus, bucket);
    kvs.set(bucket, kv);
    current.set(bucket, await readAll(kv));
  }
  const changes = planFleetChanges(current, doc, options.prune ?? false);
  if (!options.dryRun) {
    for (const c of changes) {
      const kv = kvs.get(c.bucket)!;
      if (c.action === "delete") await kv.delete(c.key);
      else await kv.put(c.key, c.value!);
    }
  }
  return changes.map(({ bucket, key, action }) => ({ bucket, key, action }));
}

async function readAll(kv: KV): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const key of await kv.keys()) {
    const entry = await kv.get(key);
    if (entry && entry.operation === "PUT") out.set(key, entry.string());
  }
  return out;
}
