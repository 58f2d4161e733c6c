import {
  AuthorizationError,
  ClosedConnectionError,
  DrainingConnectionError,
  InvalidArgumentError,
  nanos,
  PermissionViolationError,
} from "@nats-io/nats-core";
import type { MsgHdrs } from "@nats-io/nats-core";
import {
  AckPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  jetstream,
} from "@nats-io/jetstream";
import type { JetStreamManager, JsMsg, StreamConfig } from "@nats-io/jetstream";
import {
  JOB_DEDUPE_WINDOW_MS,
  JOB_DEAD_PREFIX,
  JOB_RESULT_PREFIX,
  JOB_STREAMS,
  JOB_SUBMIT_PREFIX,
} from "@zml/contracts";
import { natsConnectionOf } from "./connection.ts";
import type { Bus } from "./connection.ts";
import { ensureStream, managerFor, readerFor } from "./replicas.ts";

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
    // Batch producers read their own results with a direct get by subject, the one read a
    // permission can confine to an account's subjects (libs/bus-auth, batchGrants). The
    // services keep reading with message get, which the stream's leader answers.
    allow_direct: true,
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

/**
 * Creates the batch streams when they do not exist yet, with the bus's replicas (idempotent,
 * safe to race). With `owner`, an existing stream with another number of replicas, or
 * without the direct get its readers need, is changed; without, existing streams are only
 * looked at (intake may not change them).
 */
export async function ensureJobStreams(bus: Bus, options: { owner?: boolean } = {}): Promise<void> {
  const jsm = await managerOf(bus);
  for (const config of STREAM_CONFIGS) {
    // Without `owner`, only a stream that does not exist is created: a look that failed
    // otherwise (no leader during an election) is that failure, not a reason to create.
    await ensureStream(jsm, config, bus.replicas(), options.owner === true);
  }
}

function managerOf(bus: Bus): Promise<JetStreamManager> {
  return managerFor(natsConnectionOf(bus));
}

/** A job as a pull consumer delivers it: ack, nak, working, term, headers and bytes. */
export type JobMessage = JsMsg;

export interface StreamPublishOptions {
  headers?: MsgHdrs;
  /** JetStream dedupes messages with the same id within the stream's duplicate window. */
  msgId?: string;
  /**
   * Store the message only if its subject holds none yet: a fence that makes "record once"
   * hold even when two writers race (e.g. a redelivered job and a late ack).
   */
  onlyIfSubjectEmpty?: boolean;
  /** How long to wait for the stream's acknowledgement; default the client's (5 s). */
  timeoutMs?: number;
}

export type StreamPublishResult = { stored: true; duplicate: boolean } | { stored: false };

/**
 * Publishes to a JetStream stream and waits for its acknowledgement. With
 * `onlyIfSubjectEmpty`, a subject that already has a message answers `{ stored: false }`.
 */
export async function publishToStream(
  bus: Bus,
  subject: string,
  data: Uint8Array,
  options: StreamPublishOptions = {},
): Promise<StreamPublishResult> {
  try {
    const ack = await jetstream(natsConnectionOf(bus)).publish(subject, data, {
      ...(options.headers ? { headers: options.headers } : {}),
      ...(options.msgId ? { msgID: options.msgId } : {}),
      ...(options.onlyIfSubjectEmpty ? { expect: { lastSubjectSequence: 0 } } : {}),
      ...(options.timeoutMs !== undefined ? { timeout: options.timeoutMs } : {}),
    });
    return { stored: true, duplicate: ack.duplicate };
  } catch (err) {
    if (
      options.onlyIfSubjectEmpty &&
      err instanceof JetStreamApiError &&
      err.code === JetStreamApiCodes.StreamWrongLastSequence
    ) {
      return { stored: false };
    }
    throw err;
  }
}

/**
 * Whether trying a JetStream operation again may succeed: a timeout, no responders, a
 * connection moving to another server, JetStream between leaders (503). Not a refusal
 * (permissions, a bad or too large message, a 4xx from JetStream) and not a connection this
 * process is closing.
 */
export function isRetryableBusError(err: unknown): boolean {
  if (
    err instanceof PermissionViolationError ||
    err instanceof AuthorizationError ||
    err instanceof InvalidArgumentError ||
    err instanceof ClosedConnectionError ||
    err instanceof DrainingConnectionError
  ) {
    return false;
  }
  if (err instanceof JetStreamApiError) return err.status >= 500 || err.status === 408;
  return true;
}

const ACK = new TextEncoder().encode("+ACK");

/**
 * Acks a pulled message and waits, at most `timeoutMs`, for the consumer's leader to confirm
 * it. Rejects when no leader answered: "no responders" while the consumer elects one, or a
 * timeout. Unlike the client's `ackAck`, which marks a message acked before the server has
 * answered and never sends again, this may be called again after a failure, so a worker can
 * carry an ack through a leader change. Acking a message already acked (by an earlier
 * delivery of it, or an earlier call) is confirmed too.
 */
export async function confirmAck(bus: Bus, msg: JobMessage, timeoutMs: number): Promise<void> {
  // The ack subject is the message's reply subject: on the client's messages, not its type.
  const reply = (msg as JobMessage & { reply?: unknown }).reply;
  if (typeof reply !== "string" || reply === "") {
    throw new Error("not a JetStream message that takes acks (no reply subject)");
  }
  await natsConnectionOf(bus).request(reply, ACK, { timeout: timeoutMs });
}

/** A message read back from a stream. */
export interface StoredMessage {
  headers: { get(name: string): string };
  data: Uint8Array;
}

/** The last message on `subject` in `stream`, or null when there is none. */
export async function lastStreamMessage(
  bus: Bus,
  stream: string,
  subject: string,
): Promise<StoredMessage | null> {
  const jsm = await readerFor(natsConnectionOf(bus));
  const found = await jsm.streams.getMessage(stream, { last_by_subj: subject });
  return found ? { headers: found.header, data: found.data } : null;
}

export interface PullConsumerOptions {
  stream: string;
  /** Durable name: replicas that use the same name share the consumer's messages. */
  durable: string;
  filterSubject: string;
  /** A message not acked (or marked working) within this time is delivered again. */
  ackWaitMs: number;
  maxDeliver: number;
}

/** A durable pull consumer with explicit acks. */
export interface PullConsumer {
  /** The next message, or null when none arrived within `expiresMs`. */
  next(expiresMs: number): Promise<JobMessage | null>;
}

/** Creates (or updates) a durable pull consumer and opens it. */
export async function openPullConsumer(
  bus: Bus,
  options: PullConsumerOptions,
): Promise<PullConsumer> {
  const jsm = await managerOf(bus);
  await jsm.consumers.add(options.stream, {
    durable_name: options.durable,
    filter_subject: options.filterSubject,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(options.ackWaitMs),
    max_deliver: options.maxDeliver,
  });
  const consumer = await jetstream(natsConnectionOf(bus)).consumers.get(
    options.stream,
    options.durable,
  );
  return { next: (expiresMs) => consumer.next({ expires: expiresMs }) };
}

/** Messages a durable consumer has not finished (pending plus unacked); null if unknown. */
export async function consumerBacklog(
  bus: Bus,
  stream: string,
  durable: string,
): Promise<number | null> {
  const jsm = await managerOf(bus);
  const info = await jsm.consumers.info(stream, durable).catch(() => null);
  return info ? info.num_pending + info.num_ack_pending : null;
}
