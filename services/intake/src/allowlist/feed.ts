// The allowlist's inputs mirrored from KV, and a feed that tells listeners when it changed.
import { openKv, watchKvIntoMap } from "@zml/bus";
import type { Bus, BusLogger, KvMap } from "@zml/bus";
import {
  ATTESTATION_RESULTS_BUCKET,
  AttestationResultSchema,
  KV_BUCKETS,
  NodeSpecSchema,
  RevocationSchema,
} from "@zml/contracts";
import type { AttestationResult, NodeSpec, Revocation } from "@zml/contracts";
import type { AllowlistSources } from "./allowlist.ts";

export interface AllowlistFeed {
  sources: AllowlistSources;
  /** Calls `listener` after any change to nodes, results or revocations; returns an unsubscribe. */
  onChange(listener: () => void): () => void;
  stop(): void;
}

/** Watches nodes, attestation results and revocations into memory; resolves once loaded. */
export async function watchAllowlistFeed(bus: Bus, log: BusLogger): Promise<AllowlistFeed> {
  const [nodes, results, revocations]: [
    KvMap<NodeSpec>,
    KvMap<AttestationResult>,
    KvMap<Revocation>,
  ] = await Promise.all([
    openKv(bus, KV_BUCKETS.nodes).then((kv) =>
      watchKvIntoMap(bus, kv, { schema: NodeSpecSchema, log }),
    ),
    openKv(bus, ATTESTATION_RESULTS_BUCKET).then((kv) =>
      watchKvIntoMap(bus, kv, { schema: AttestationResultSchema, log }),
    ),
    openKv(bus, KV_BUCKETS.revocations).then((kv) =>
      watchKvIntoMap(bus, kv, { schema: RevocationSchema, log }),
    ),
  ]);
  const listeners = new Set<() => void>();
  const notify = () => {
    for (const listener of listeners) listener();
  };
  const unwatch = [nodes, results, revocations].map((m) => m.onChange(notify));
  return {
    sources: { nodes: nodes.map, results: results.map, revocations: revocations.map },
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    stop() {
      for (const off of unwatch) off();
      for (const m of [nodes, results, revocations]) m.stop();
      listeners.clear();
    },
  };
}
