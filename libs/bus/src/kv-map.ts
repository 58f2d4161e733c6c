import { Kvm } from "@nats-io/kv";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import type { z } from "zod";
import { natsConnectionOf } from "./connection.ts";
import type { Bus, BusLogger } from "./connection.ts";
import { decodeJson } from "./json-codec.ts";
import { ensureStreamReplicas, managerFor } from "./replicas.ts";

/**
 * Opens a KV bucket, creating it (with the given history and the bus's replicas) if it does
 * not exist yet. An existing bucket is taken as it is: readers may not change it.
 */
export async function openKv(bus: Bus, bucket: string, history = 1): Promise<KV> {
  return new Kvm(natsConnectionOf(bus)).create(bucket, { history, replicas: bus.replicas() });
}

/**
 * Opens a bucket this identity owns (writes, and may update): created when missing, and an
 * existing one with another number of replicas than the bus's is changed to it, so a new
 * replica setting takes effect on the next start.
 */
export async function openOwnedKv(bus: Bus, bucket: string, history = 1): Promise<KV> {
  const kv = await openKv(bus, bucket, history);
  const jsm = await managerFor(natsConnectionOf(bus));
  await ensureStreamReplicas(jsm, { name: `KV_${bucket}` }, bus.replicas());
  return kv;
}

export interface KvMapOptions<S extends z.ZodType> {
  schema: S;
  log: BusLogger;
  /** Give up loading the current contents after this long; default 20 s. */
  loadTimeoutMs?: number;
  /** Called after every applied change (put or delete), during the initial load too. */
  onChange?: (
    key: string,
    value: z.output<S> | undefined,
    map: ReadonlyMap<string, z.output<S>>,
  ) => void;
}

const KV_LOAD_TIMEOUT_MS = 20_000;

/** A bucket's current contents did not arrive in time (its stream may have no leader). */
export class KvLoadTimeoutError extends Error {
  readonly code = "kv_load_timeout";
  constructor(bucket: string, timeoutMs: number) {
    super(`KV bucket ${bucket} did not load within ${timeoutMs} ms`);
    this.name = "KvLoadTimeoutError";
  }
}

/** A KV bucket mirrored in memory: reads are map lookups, never network calls. */
export interface KvMap<T> {
  readonly map: ReadonlyMap<string, T>;
  /** Revision of the last applied entry. */
  revision(): number;
  /** Adds a listener for changes applied from now on; returns a function that removes it. */
  onChange(listener: (key: string, value: T | undefined) => void): () => void;
  stop(): void;
}

/**
 * Watches a bucket into an in-memory map: resolves once the current contents are loaded,
 * then keeps applying live updates. An entry that fails its schema is logged and the key
 * removed, so a bad write never leaves a stale-but-valid-looking value behind.
 */
export async function watchKvIntoMap<S extends z.ZodType>(
  kv: KV,
  options: KvMapOptions<S>,
): Promise<KvMap<z.output<S>>> {
  const map = new Map<string, z.output<S>>();
  const listeners = new Set<(key: string, value: z.output<S> | undefined) => void>();
  let revision = 0;
  // The watcher replays the last value of every key, then live updates. The replay is over
  // once an entry reports nothing pending; an empty bucket replays nothing at all.
  const status = await kv.status();
  const initiallyEmpty = status.values === 0;
  const watcher = await kv.watch();
  let markLoaded: () => void = () => {};
  let failLoad: (err: Error) => void = () => {};
  const loaded = new Promise<void>((resolve, reject) => {
    markLoaded = resolve;
    failLoad = reject;
  });
  if (initiallyEmpty) markLoaded();
  // A watch whose stream loses its leader mid-replay may never finish it: give up (the
  // caller retries its start) rather than wait forever.
  const loadTimer = setTimeout(() => {
    failLoad(new KvLoadTimeoutError(status.bucket, options.loadTimeoutMs ?? KV_LOAD_TIMEOUT_MS));
  }, options.loadTimeoutMs ?? KV_LOAD_TIMEOUT_MS);

  const apply = (e: KvWatchEntry) => {
    revision = e.revision;
    let value: z.output<S> | undefined;
    try {
      // Reading the operation decodes the entry's headers, which throws on a forged block.
      if (e.operation === "PUT") {
        value = decodeJson(`${e.bucket}.${e.key}`, options.schema, e.value);
        map.set(e.key, value);
      } else {
        map.delete(e.key);
      }
    } catch (err) {
      options.log.warn({ bucket: e.bucket, key: e.key, err: String(err) }, "invalid kv entry");
      map.delete(e.key);
    }
    options.onChange?.(e.key, value, map);
    for (const listener of listeners) listener(e.key, value);
    if (e.delta === 0) markLoaded();
  };

  void (async () => {
    for await (const e of watcher) apply(e);
  })();
  try {
    await loaded;
  } catch (err) {
    watcher.stop();
    throw err;
  } finally {
    clearTimeout(loadTimer);
  }
  return {
    map,
    revision: () => revision,
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    stop: () => watcher.stop(),
  };
}

/** Opens a bucket (creating it when missing) and watches it into memory. */
export async function watchBucket<S extends z.ZodType>(
  bus: Bus,
  bucket: string,
  options: KvMapOptions<S>,
): Promise<KvMap<z.output<S>>> {
  return watchKvIntoMap(await openKv(bus, bucket), options);
}
