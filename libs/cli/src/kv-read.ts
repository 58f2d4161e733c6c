import { openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import type { z } from "zod";

/**
 * Reads every valid document of a bucket, sorted by key. Entries that fail their schema
 * are skipped, as the services skip them.
 */
export async function readBucket<S extends z.ZodType>(
  bus: Bus,
  bucket: string,
  schema: S,
): Promise<Array<{ key: string; value: z.output<S> }>> {
  const kv = await openKv(bus, bucket);
  const out: Array<{ key: string; value: z.output<S> }> = [];
  for await (const key of await kv.keys()) {
    const e = await kv.get(key);
    if (!e || e.operation !== "PUT") continue;
    const parsed = schema.safeParse(e.json());
    if (parsed.success) out.push({ key, value: parsed.data });
  }
  return out.sort((a, b) => a.key.localeCompare(b.key));
}
