import { nanos } from "@nats-io/nats-core";
import { DiscardPolicy, RetentionPolicy, StorageType, jetstreamManager } from "@nats-io/jetstream";
import type { StreamConfig } from "@nats-io/jetstream";
import {
  JOB_DEDUPE_WINDOW_MS,
  JOB_DEAD_PREFIX,
  JOB_RESULT_PREFIX,
  JOB_STREAMS,
  JOB_SUBMIT_PREFIX,
} from "@zml/contracts";
import type { Bus } from "./connection.ts";

const DAY_MS = 24 * 60 * 60_000;

/**
 * The batch streams, file-backed. JetStream's default `sync_interval` (2 min) leaves that
 * window of acknowledged writes exposed to a host crash (not to a process crash: the
 * kernel's page cache survives that); run nats-server with `sync_interval: always` to close
 * it at some throughput cost.
 */
const STREAM_CONFIGS: Array<Partial<StreamConfig> & { name: string }> = [
  {
    // Work queue: a job leaves the stream when a worker acks it (after its result is stored).
    name: JOB_STREAMS.jobs,
    subjects: [`${JOB_SUBMIT_PREFIX}.>`],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    duplicate_window: nanos(JOB_DEDUPE_WINDOW_MS),
    discard: DiscardPolicy.New,
    max_msg_size: 8 * 1024 * 1024,
  },
  {
    // One message per job id; kept a week for collection.
    name: JOB_STREAMS.results,
    subjects: [`${JOB_RESULT_PREFIX}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(7 * DAY_MS),
    duplicate_window: nanos(JOB_DEDUPE_WINDOW_MS),
  },
  {
    // Copies of jobs that kept failing (poison), for inspection.
    name: JOB_STREAMS.dead,
    subjects: [`${JOB_DEAD_PREFIX}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(30 * DAY_MS),
  },
];

/** Creates the batch streams when they do not exist yet (idempotent, safe to race). */
export async function ensureJobStreams(bus: Bus): Promise<void> {
  const jsm = await jetstreamManager(bus.nc);
  for (const config of STREAM_CONFIGS) {
    try {
      await jsm.streams.info(config.name);
    } catch {
      await jsm.streams.add(config).catch(async (err: unknown) => {
        // Another service created it between our check and our add.
        await jsm.streams.info(config.name).catch(() => {
          throw err;
        });
      });
    }
  }
}
