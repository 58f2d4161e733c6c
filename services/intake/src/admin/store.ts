import { openKv } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import { ZmlError } from "@zml/contracts";

/** One stored configuration document, as the JSON text in KV. */
export interface StoredDoc {
  key: string;
  value: string;
  revision: number;
}

/** The admin API's view of the configuration buckets. */
export interface ConfigStore {
  list(bucket: string): Promise<StoredDoc[]>;
  get(bucket: string, key: string): Promise<StoredDoc | undefined>;
  /**
   * Writes `value`. With `revision`, only if the key is still at that revision (0: still
   * absent); returns false when it moved on meanwhile.
   */
  put(bucket: string, key: string, value: string, revision?: number): Promise<boolean>;
  /** Returns false when there was nothing to delete. */
  delete(bucket: string, key: string): Promise<boolean>;
}

/**
 * The configuration buckets in NATS KV, read directly (admin calls are rare and want the
 * latest revision, not the watched copy). A bus problem becomes 503 `bus_unavailable`.
 */
export function createKvConfigStore(bus: Bus): ConfigStore {
  const kvs = new Map<string, Promise<KV>>();
  const kvOf = (bucket: string) => {
    let kv = kvs.get(bucket);
    if (!kv) {
      kv = openKv(bus, bucket);
      kvs.set(bucket, kv);
      kv.catch(() => kvs.delete(bucket));
    }
    return kv;
  };
  const guard = async <T>(op: () => Promise<T>): Promise<T> => {
    if (!bus.isConnected()) throw unavailable();
    try {
      return await op();
    } catch (err) {
      if (err instanceof ZmlError) throw err;
      throw unavailable();
    }
  };
  const read = async (kv: KV, key: string): Promise<StoredDoc | undefined> => {
    const e = await kv.get(key);
    return e && e.operation === "PUT"
      ? { key, value: e.string(), revision: e.revision }
      : undefined;
  };
  return {
    list: (bucket) =>
      guard(async () => {
        const kv = await kvOf(bucket);
        const out: StoredDoc[] = [];
        for await (const key of await kv.keys()) {
          const doc = await read(kv, key);
          if (doc) out.push(doc);
        }
        return out.sort((a, b) => a.key.localeCompare(b.key));
      }),
    get: (bucket, key) => guard(async () => read(await kvOf(bucket), key)),
    put: (bucket, key, value, revision) =>
      guard(async () => {
        const kv = await kvOf(bucket);
        if (revision === undefined) {
          await kv.put(key, value);
          return true;
        }
        try {
          if (revision === 0) await kv.create(key, value);
          else await kv.update(key, value, revision);
          return true;
        } catch (err) {
          if (isWrongRevision(err)) return false;
          throw err;
        }
      }),
    delete: (bucket, key) =>
      guard(async () => {
        const kv = await kvOf(bucket);
        if (!(await read(kv, key))) return false;
        await kv.delete(key);
        return true;
      }),
  };
}

function unavailable(): ZmlError {
  return new ZmlError("bus_unavailable", "configuration store is unreachable", { retryAfterS: 1 });
}

/** JetStream's "wrong last sequence" (a concurrent write won). */
function isWrongRevision(err: unknown): boolean {
  const text = String((err as Error).message ?? err);
  return /wrong last sequence|key exists/i.test(text);
}
