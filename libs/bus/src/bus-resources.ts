import { ALL_KV_BUCKETS } from "@zml/contracts";
import type { Bus } from "./connection.ts";
import { ensureJobStreams } from "./job-streams.ts";
import { openOwnedKv } from "./kv-map.ts";

/**
 * Creates every KV bucket and stream of the system that does not exist yet. Run once by the
 * admin identity when a bus is set up: readers may only bind to a bucket, never create one,
 * so a service never depends on another having started first.
 * Every one gets the bus's replicas, existing ones included (see {@link Bus.replicas}).
 */
export async function ensureBusResources(bus: Bus): Promise<void> {
  for (const bucket of ALL_KV_BUCKETS) await openOwnedKv(bus, bucket);
  await ensureJobStreams(bus, { owner: true });
}
