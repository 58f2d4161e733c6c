import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager, StreamConfig } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";

/** The most replicas JetStream keeps of a stream. */
export const MAX_REPLICAS = 5;

/** Replicas on a cluster when none are configured: survives the loss of any one server. */
export const CLUSTER_DEFAULT_REPLICAS = 3;

/**
 * How many copies of every stream and KV bucket to keep: the configured number, else 3 when
 * the server is part of a cluster (its INFO names one) and 1 on a single server.
 *
 * The cluster's size is not what decides: while one server is down the others only know of
 * the ones still up, and a default taken from that would shrink every bucket on the next
 * start. A cluster of two sets `NATS_REPLICAS=2`.
 */
export function replicasFor(serverInfo: { cluster?: string } | undefined, configured?: number) {
  if (configured !== undefined) return configured;
  return serverInfo?.cluster ? CLUSTER_DEFAULT_REPLICAS : 1;
}

/** A stream could not be given the replicas configured (e.g. fewer servers than replicas). */
export class ReplicaUpdateError extends Error {
  readonly code = "replica_update_failed";
  readonly stream: string;
  constructor(stream: string, from: number, to: number, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      `could not change stream ${stream} from ${from} to ${to} replicas: ${reason}` +
        " (NATS_REPLICAS must not exceed the number of JetStream servers)",
      { cause },
    );
    this.name = "ReplicaUpdateError";
    this.stream = stream;
  }
}

/**
 * Creates `config`'s stream with `replicas` copies if it does not exist. An existing one is
 * brought in line (`mayUpdate`) where it differs in what its owner may change later: the
 * number of replicas (stream update: JetStream adds or removes peers and catches new ones up
 * in the background), and direct get when `config` turns it on (a stream made before its
 * readers needed it). Everything else in an existing stream's configuration is kept. Safe
 * to race: a stream another process created meanwhile is taken as it is, then updated.
 *
 * Returns what was done, for the caller's log.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  config: Partial<StreamConfig> & { name: string },
  replicas: number,
  mayUpdate = true,
): Promise<"created" | "updated" | "unchanged"> {
  let existing: StreamConfig;
  try {
    existing = (await jsm.streams.info(config.name)).config;
  } catch (err) {
    if (!isStreamNotFound(err)) throw err;
    try {
      await jsm.streams.add({ ...config, num_replicas: replicas });
      return "created";
    } catch (addErr) {
      // Another process created it between our look and our add.
      existing = (
        await jsm.streams.info(config.name).catch(() => {
          throw addErr;
        })
      ).config;
    }
  }
  const replicasDiffer = existing.num_replicas !== replicas;
  const directMissing = config.allow_direct === true && existing.allow_direct !== true;
  if (!mayUpdate || (!replicasDiffer && !directMissing)) return "unchanged";
  try {
    await jsm.streams.update(config.name, {
      ...existing,
      num_replicas: replicas,
      ...(directMissing ? { allow_direct: true } : {}),
    });
  } catch (err) {
    if (!replicasDiffer) throw err;
    throw new ReplicaUpdateError(config.name, existing.num_replicas, replicas, err);
  }
  return "updated";
}

function isStreamNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}
const managers = new WeakMap<NatsConnection, Promise<JetStreamManager>>();

const readers = new WeakMap<NatsConnection, Promise<JetStreamManager>>();

/**
 * A JetStream manager for reads of streams one knows exist: made without the account info
 * request the checked one costs, which only the meta leader answers (a stream's own requests
 * need only that stream's leader).
 */
export function readerFor(nc: NatsConnection): Promise<JetStreamManager> {
  let jsm = readers.get(nc);
  if (!jsm) {
    jsm = jetstreamManager(nc, { checkAPI: false });
    readers.set(nc, jsm);
  }
  return jsm;
}

/** One JetStream manager per connection (creating one costs a round trip). */
export function managerFor(nc: NatsConnection): Promise<JetStreamManager> {
  let jsm = managers.get(nc);
  if (!jsm) {
    jsm = jetstreamManager(nc);
    // A failed attempt (JetStream briefly unreachable) must not stick.
    jsm.catch(() => managers.delete(nc));
    managers.set(nc, jsm);
  }
  return jsm;
}
