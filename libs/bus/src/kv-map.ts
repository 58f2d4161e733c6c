import { Kvm } from "@nats-io/kv";
import { jetstream } from "@nats-io/jetstream";
import type { MsgRequest } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { backoffDelayMs } from "@zml/contracts";
import type { z } from "zod";
import { natsConnectionOf } from "./connection.ts";
import type { Bus, BusLogger } from "./connection.ts";
import { decodeJson } from "./json-codec.ts";
import { ensureStream, managerFor, readerFor } from "./replicas.ts";

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
  await ensureStream(jsm, { name: `KV_${bucket}` }, bus.replicas());
  return kv;
}

/** A key's latest entry as the bucket stream's leader has it. */
export interface KvLatest {
  operation: "PUT" | "DEL" | "PURGE";
  value: Uint8Array;
  revision: number;
}

/**
 * Reads a key's latest entry from the bucket stream's leader, which has every write that
 * was acknowledged before the read (a KV `get` is a direct get, which a replica that lags
 * may answer). Null when the key has no entry, or one whose header block cannot be read (a
 * forged one); throws when the leader does not answer.
 */
export async function readKvLatest(
  bus: Bus,
  bucket: string,
  key: string,
): Promise<KvLatest | null> {
  const jsm = await readerFor(natsConnectionOf(bus));
  const stored = await jsm.streams.getMessage(`KV_${bucket}`, {
    last_by_subj: `$KV.${bucket}.${key}`,
  });
  if (!stored) return null;
  let op: string;
  try {
    op = stored.header.get(OPERATION_HEADER);
  } catch {
    return null;
  }
  return {
    operation: op === "DEL" || op === "PURGE" ? op : "PUT",
    value: stored.data,
    revision: stored.seq,
  };
}

export interface KvMapOptions<S extends z.ZodType> {
  schema: S;
  log: BusLogger;
  /** Give up loading the current contents after this long; default 20 s. */
  loadTimeoutMs?: number;
  /**
   * Buckets with at most this many entries (deleted keys' markers count) are loaded by
   * reading them from the stream leader, one request per entry; bigger ones through their
   * watch, one consumer streaming them all. Default 2 000 (about a second to read).
   */
  readMaxEntries?: number;
  /** Called after every applied change (put or delete), during the initial load too. */
  onChange?: (
    key: string,
    value: z.output<S> | undefined,
    map: ReadonlyMap<string, z.output<S>>,
  ) => void;
}

const KV_LOAD_TIMEOUT_MS = 20_000;
const READ_MAX_ENTRIES = 2_000;
/** Pause between tries of a load step that failed (no stream leader yet, a timeout). */
const LOAD_RETRY_MS = 250;
/**
 * How long one try to create a bucket's watch waits: short, since a create placed on a dead
 * server never answers and the next try is placed afresh (a live server answers in ms).
 */
const WATCH_CREATE_TIMEOUT_MS = 2_000;
/** Pauses between tries to start following the bucket: doubling from the first to the cap. */
const FOLLOW_RETRY = { firstMs: 250, maxMs: 2_000 };
const OPERATION_HEADER = "KV-Operation";

/** A bucket's current contents did not arrive in time (its stream may have no leader). */
export class KvLoadTimeoutError extends Error {
  readonly code = "kv_load_timeout";
  constructor(bucket: string, timeoutMs: number, cause?: unknown) {
    const last = cause instanceof Error ? cause.message : typeof cause === "string" ? cause : "";
    const reason = last === "" ? "" : ` (last error: ${last})`;
    super(`KV bucket ${bucket} did not load within ${timeoutMs} ms${reason}`, { cause });
    this.name = "KvLoadTimeoutError";
  }
}

/** A KV bucket mirrored in memory: reads are map lookups, never network calls. */
export interface KvMap<T> {
  readonly map: ReadonlyMap<string, T>;
  /** Revision of the last applied entry. */
  revision(): number;
  /**
   * True while live updates arrive (the bucket's watch exists). False from the load until
   * the watch is created, and again while it is re-created: changes made meanwhile are not
   * lost, they are applied once it follows again.
   */
  following(): boolean;
  /** Adds a listener for changes applied from now on; returns a function that removes it. */
  onChange(listener: (key: string, value: T | undefined) => void): () => void;
  stop(): void;
}

/** One bucket entry, from the initial read or from the watch. */
interface RawEntry {
  key: string;
  revision: number;
  /** Reading it decodes the entry's headers, which throws on a forged block. */
  operation(): string;
  value: Uint8Array;
}

/**
 * Mirrors a bucket into an in-memory map: resolves once its current contents are loaded,
 * then keeps applying live updates. An entry that fails its schema is logged and the key
 * removed, so a bad write never leaves a stale-but-valid-looking value behind.
 *
 * Loading needs only what a JetStream quorum gives: the bucket stream's leader (stream info,
 * then its messages read one after another from the leader's store). The watch that
 * delivers live updates is an R1 consumer, which nats-server may place on any of the
 * stream's peers, a dead one included (nats-server 2.9 places it on a SIGKILLed peer until
 * the cluster marks that peer offline, minutes later): so the watch is created after the
 * load, off the start-up path, and a create that times out is tried again on its own, from
 * the revision after the last one applied. Until it exists, the map holds the loaded
 * contents and {@link KvMap.following} is false.
 *
 * A bucket with more than `readMaxEntries` entries is loaded through the watch instead (one
 * request per entry would take too long); its create is tried again the same way, within
 * the load timeout.
 *
 * Each load step that fails (no stream leader yet during an election, a timeout) is tried
 * again until `loadTimeoutMs` has passed since the start, then the load fails with
 * {@link KvLoadTimeoutError}, which the caller's start-up retry handles (no quorum: waiting
 * is right).
 */
export async function watchKvIntoMap<S extends z.ZodType>(
  bus: Bus,
  kv: KV,
  options: KvMapOptions<S>,
): Promise<KvMap<z.output<S>>> {
  const map = new Map<string, z.output<S>>();
  const listeners = new Set<(key: string, value: z.output<S> | undefined) => void>();
  let revision = 0;
  let stopped = false;
  let watching: { stop(): void } | undefined;
  const timeoutMs = options.loadTimeoutMs ?? KV_LOAD_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  let bucket = "(unknown)";

  const apply = (e: RawEntry) => {
    if (e.revision <= revision) return; // already applied (a watch re-created from earlier)
    revision = e.revision;
    let value: z.output<S> | undefined;
    try {
      if (e.operation() === "PUT") {
        value = decodeJson(`${bucket}.${e.key}`, options.schema, e.value);
        map.set(e.key, value);
      } else {
        map.delete(e.key);
      }
    } catch (err) {
      options.log.warn({ bucket, key: e.key, err: String(err) }, "invalid kv entry");
      map.delete(e.key);
    }
    options.onChange?.(e.key, value, map);
    for (const listener of listeners) listener(e.key, value);
  };

  /** Runs one load step, trying again on failure until the load's deadline. */
  const step = async <T>(run: () => Promise<T>): Promise<T> => {
    for (;;) {
      try {
        return await run();
      } catch (err) {
        if (Date.now() + LOAD_RETRY_MS >= deadline) {
          throw new KvLoadTimeoutError(bucket, timeoutMs, err);
        }
        await sleep(LOAD_RETRY_MS);
      }
    }
  };

  const status = await step(() => kv.status());
  bucket = status.bucket;
  const stream = status.streamInfo.config.name;
  const prefix = `$KV.${bucket}.`;
  const last = status.streamInfo.state.last_seq;
  let markLoaded: () => void = () => {};
  const loaded = new Promise<void>((resolve) => (markLoaded = resolve));
  if (status.streamInfo.state.messages <= (options.readMaxEntries ?? READ_MAX_ENTRIES)) {
    // The contents as of the stream info: each key's last entry (older revisions are gone
    // from a history-1 bucket; a longer history is replayed in order). Entries written
    // meanwhile past `last` come from the watch.
    const jsm = await readerFor(natsConnectionOf(bus));
    for (let seq = Math.max(1, status.streamInfo.state.first_seq); seq <= last;) {
      const from = seq;
      const stored = await step(() => jsm.streams.getMessage(stream, nextEntryAt(from, prefix)));
      if (!stored) break;
      apply({
        key: stored.subject.slice(prefix.length),
        revision: stored.seq,
        operation: () => operationOf(stored.header),
        value: stored.data,
      });
      seq = stored.seq + 1;
    }
    markLoaded();
  }

  // The same bucket, bound (no request) to a client whose requests wait less long.
  const watched = await new Kvm(
    jetstream(natsConnectionOf(bus), { timeout: WATCH_CREATE_TIMEOUT_MS }),
  ).open(bucket);
  /** Creates the watch, trying again until it exists; undefined once stopped. */
  const createWatch = async () => {
    for (let attempt = 1; !stopped; attempt++) {
      try {
        const watcher = await watched.watch({ resumeFromRevision: revision + 1 });
        if (attempt > 1) options.log.info({ bucket, attempt }, "kv watch created");
        return watcher;
      } catch (err) {
        const pauseMs = backoffDelayMs(FOLLOW_RETRY, attempt);
        options.log.warn(
          { bucket, attempt, err: String(err), retry_in_ms: pauseMs },
          "kv watch not created yet; retrying",
        );
        await sleep(pauseMs);
      }
    }
    return undefined;
  };
  const follow = async () => {
    while (!stopped) {
      const watcher = await createWatch();
      if (!watcher) return;
      if (stopped) {
        watcher.stop();
        return;
      }
      watching = watcher;
      // Loading through the watch: done once it has delivered all it had pending.
      if (revision >= last) markLoaded();
      for await (const e of watcher) {
        apply({ key: e.key, revision: e.revision, operation: () => e.operation, value: e.value });
        if (e.delta === 0 || revision >= last) markLoaded();
      }
      // Ended: stopped here, or the client gave up re-creating its consumer (its server went
      // away). Follow again from the last revision applied.
      watching = undefined;
      if (!stopped) await sleep(FOLLOW_RETRY.firstMs);
    }
  };
  void follow();

  let expire: NodeJS.Timeout | undefined;
  const expired = new Promise<"expired">((resolve) => {
    expire = setTimeout(() => resolve("expired"), Math.max(0, deadline - Date.now()));
  });
  const outcome = await Promise.race([loaded, expired]);
  clearTimeout(expire);
  if (outcome === "expired") {
    stopped = true;
    watching?.stop();
    throw new KvLoadTimeoutError(bucket, timeoutMs);
  }

  return {
    map,
    revision: () => revision,
    following: () => watching !== undefined,
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    stop: () => {
      stopped = true;
      watching?.stop();
    },
  };
}

/** A stored entry's operation, read as the KV client reads it (its headers may throw). */
function operationOf(h: { get(name: string): string }): string {
  if (h.get("Nats-Marker-Reason") === "MaxAge") return "PURGE";
  return h.get(OPERATION_HEADER) || "PUT";
}

/**
 * The stream's first entry at or after `seq`. The stream leader's message get (not a direct
 * get, which any replica answers): its answer names the entry's sequence and subject apart
 * from its headers, so an entry with a forged header block is skipped as invalid instead of
 * failing the whole read, and the leader's store is the latest one. nats-server takes
 * `next_by_subj` on this API since 2.9; the client types it for direct gets only.
 */
function nextEntryAt(seq: number, prefix: string): MsgRequest {
  return { seq, next_by_subj: `${prefix}>` } as MsgRequest;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Opens a bucket (creating it when missing) and watches it into memory. */
export async function watchBucket<S extends z.ZodType>(
  bus: Bus,
  bucket: string,
  options: KvMapOptions<S>,
): Promise<KvMap<z.output<S>>> {
  return watchKvIntoMap(bus, await openKv(bus, bucket), options);
}
