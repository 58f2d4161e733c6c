import type { NatsConnection, PublishOptions } from "@nats-io/nats-core";
import { ACCEPT_REPLY_KIND, HEADERS, REPLY_BATCH } from "@zml/contracts";
import { createHeaders } from "./fast-headers.ts";
import { BATCH_OVERHEAD, batchedSize, encodeFrameBatch } from "./frame-batch.ts";
import type { OutgoingFrame } from "./frame-batch.ts";

/**
 * Publishes made during one turn of the event loop, handed to the NATS client together when
 * the turn ends (`setImmediate`). The client writes its buffer to the socket at every
 * microtask checkpoint, and Node reaches one after every socket callback: sixteen requests
 * read, or sixteen node answers received, in one turn would cost sixteen socket writes (on
 * loopback each also runs the receiving side's network stack), instead of one. The delay is
 * the rest of the current turn, microseconds. Order among these publishes is kept, so one
 * request's frames, and a route request and its cancel, never overtake each other.
 *
 * Reply frames queued with `frame` for the same batch subject (one requester process) travel
 * as one message, a frame batch (`REPLY_BATCH` in @zml/contracts): a turn that reads a token
 * from each of 200 streams sends one message per requester, not 200. The turn's end, not a
 * timer, closes a batch, so batching adds no wait of its own: `setImmediate` runs after the
 * poll phase, once every socket read of this turn has been handled (a microtask would run
 * after each read, and batch nothing across streams). A batch is placed in the order at its
 * first frame; a message published alone closes every open batch, so nothing published
 * after it can travel in a batch ahead of it. A batch closes too when it reaches the largest
 * payload the connection takes. A batch of one frame goes as that frame alone, to its reply
 * inbox, as a requester that asked for batches also takes: a lone request on an idle system
 * pays nothing for batching.
 */
export interface TurnPublisher {
  /** Queues a publish; `onFailed` learns if the client refused it (a closed connection). */
  publish(
    subject: string,
    data: Uint8Array,
    options: PublishOptions,
    onFailed?: (err: unknown) => void,
  ): void;
  /**
   * Queues one reply frame into this turn's batch for `batchSubject`. The frame stays open
   * until the turn ends: `extend` may add to its body until then. The publisher notes the
   * batch in the frame's `batch`: a frame created with that property (undefined) keeps the
   * shape it was created with, with no property added to it afterwards (one per token).
   */
  frame(batchSubject: string, frame: OutgoingFrame & { batch?: unknown }): QueuedFrame;
  /**
   * Adds `piece` to the body of `frame` (a chunk) when its batch is still open and has room;
   * false when the caller must queue a new frame instead.
   */
  extend(frame: QueuedFrame, piece: Uint8Array): boolean;
  /** Hands everything queued to the client now (before a drain or a close). */
  flushNow(): void;
}

/** A frame in a batch of this turn (see `TurnPublisher.frame`). */
export interface QueuedFrame extends OutgoingFrame {
  readonly batch: unknown;
}

interface Queued {
  subject: string;
  data: Uint8Array;
  options: PublishOptions;
  onFailed: ((err: unknown) => void) | undefined;
}

interface Batch {
  subject: string;
  frames: OutgoingFrame[];
  bytes: number;
}

interface BatchedFrame extends OutgoingFrame {
  batch: Batch;
}

/** Room left in a batch for its NATS headers, as in one frame (route-reply.ts). */
const BATCH_HEADER_ROOM = 16 * 1024;
const MAX_FRAMES_PER_BATCH = 0xffff;

const publishers = new WeakMap<NatsConnection, TurnPublisher>();

/** The one turn publisher of a connection: everything it queues shares one order. */
export function turnPublisherOf(nc: NatsConnection): TurnPublisher {
  let publisher = publishers.get(nc);
  if (!publisher) {
    publisher = createTurnPublisher(nc);
    publishers.set(nc, publisher);
  }
  return publisher;
}

function createTurnPublisher(nc: NatsConnection): TurnPublisher {
  let queue: Array<Queued | Batch> = [];
  /** This turn's batches that may still take frames, by subject. */
  const open = new Map<string, Batch>();
  let scheduled = false;
  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(flushNow);
  };
  const batchLimit = () =>
    Math.max(64 * 1024, (nc.info?.max_payload ?? 1024 * 1024) - BATCH_HEADER_ROOM);
  const flushNow = () => {
    scheduled = false;
    open.clear();
    const turn = queue;
    queue = [];
    for (let i = 0; i < turn.length; i++) {
      const q = turn[i]!;
      if ("frames" in q) publishBatch(q);
      else publishOne(q);
    }
  };
  const publishOne = (q: Queued) => {
    try {
      nc.publish(q.subject, q.data, q.options);
    } catch (err) {
      // Only a closed or draining connection refuses: the message is lost either way, and
      // whoever waits for it has its own bound (a timeout, a liveness sweep).
      q.onFailed?.(err);
    }
  };
  const publishBatch = (b: Batch) => {
    if (b.frames.length === 1) {
      publishAlone(b.subject, b.frames[0]!);
      return;
    }
    const h = createHeaders();
    h.set(HEADERS.type, REPLY_BATCH.type);
    h.set(HEADERS.replyKind, REPLY_BATCH.kind);
    try {
      nc.publish(b.subject, encodeFrameBatch(b.frames), { headers: h });
    } catch {
      // As above: every stream in it learns of the loss from its next frame's gap, or from
      // its requester's own bounds.
    } finally {
      // Writers keep their last frame until their next one: it holds no bytes from now on.
      for (let i = 0; i < b.frames.length; i++) b.frames[i]!.pieces.length = 0;
      b.frames = [];
    }
  };
  /** One frame as it would travel without batches, to the inbox beside the batch subject. */
  const publishAlone = (batchSubject: string, f: OutgoingFrame) => {
    const h = createHeaders();
    for (const [name, value] of f.headers) h.set(name, value);
    if (f.kind === "accept") h.set(HEADERS.replyKind, ACCEPT_REPLY_KIND);
    else {
      h.set(HEADERS.replyKind, f.kind);
      h.set(HEADERS.seq, String(f.seq));
    }
    const inbox = `${batchSubject.slice(0, batchSubject.lastIndexOf(".") + 1)}${f.id}`;
    const data =
      f.pieces.length === 0
        ? EMPTY
        : f.pieces.length === 1
          ? f.pieces[0]!
          : concat(f.pieces, f.bytes);
    f.pieces.length = 0;
    try {
      nc.publish(inbox, data, { headers: h });
    } catch {
      // As for a batch: the stream learns of the loss from its next frame or its bounds.
    }
  };
  return {
    publish(subject, data, options, onFailed) {
      open.clear();
      queue.push({ subject, data, options, onFailed });
      schedule();
    },
    frame(batchSubject, frame) {
      const size = batchedSize(frame);
      let batch = open.get(batchSubject);
      if (
        batch === undefined ||
        batch.bytes + size > batchLimit() ||
        batch.frames.length === MAX_FRAMES_PER_BATCH
      ) {
        batch = { subject: batchSubject, frames: [], bytes: BATCH_OVERHEAD };
        open.set(batchSubject, batch);
        queue.push(batch);
        schedule();
      }
      const queued = frame as BatchedFrame;
      queued.batch = batch;
      batch.frames.push(queued);
      batch.bytes += size;
      return queued;
    },
    extend(frame, piece) {
      const batch = (frame as BatchedFrame).batch;
      if (open.get(batch.subject) !== batch || batch.bytes + piece.byteLength > batchLimit()) {
        return false;
      }
      frame.pieces.push(piece);
      frame.bytes += piece.byteLength;
      batch.bytes += piece.byteLength;
      return true;
    },
    flushNow,
  };
}

const EMPTY = new Uint8Array(0);

function concat(pieces: readonly Uint8Array[], bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.byteLength;
  }
  return out;
}
