import { createInbox } from "@nats-io/nats-core";
import type { Msg, MsgHdrs, Subscription } from "@nats-io/nats-core";
import { ACCEPT_REPLY_KIND, HEADERS, REPLY_BATCH, REPLY_KINDS, ZmlError } from "@zml/contracts";
import type { ErrorBody, ReplyKind } from "@zml/contracts";
import { natsConnectionOf } from "./connection.ts";
import { createHeaders as natsHeaders, decodeHeadersOf, headerOf } from "./fast-headers.ts";
import { decodeFrameBatch, encodeMeta } from "./frame-batch.ts";
import { createInterner } from "./interned.ts";
import type { IncomingFrame } from "./frame-batch.ts";
import { turnPublisherOf } from "./turn-publisher.ts";
import type { QueuedFrame } from "./turn-publisher.ts";
import type { Bus } from "./connection.ts";

/**
 * The reply side of `route.request`: a response travels back to the requester's inbox as
 * numbered frames (`full`, or `head` → `chunk`* → `end` | `error`). Body bytes are sent as
 * the node produced them, never re-encoded. A requester that names a batch subject
 * (`HEADERS.replyBatch`) gets its frames in frame batches (`REPLY_BATCH`): one message per
 * requester per turn of the dispatcher's event loop, each frame still numbered on its own,
 * and a stream's chunks of one turn merged into one frame.
 */

export interface RouteFrame {
  kind: ReplyKind;
  seq: number;
  /** Upstream HTTP status on `full` and `head` frames. */
  status: number | undefined;
  /** Node time in ms on `full` and `head` frames (see `HEADERS.nodeMs`). */
  nodeMs: number | undefined;
  contentType: string | undefined;
  routing: string | undefined;
  /** The node's `Retry-After` in seconds, on `full` and `head` frames of an answer with one. */
  retryAfterS: number | undefined;
  data: Uint8Array;
}

/** What `full` and `head` frames say about the node's answer besides its status and type. */
export interface AnswerMeta {
  /** Node time in ms (see `HEADERS.nodeMs`). */
  nodeMs?: number | undefined;
  /** The node's `Retry-After`, in seconds, passed on to the caller. */
  retryAfterS?: number | undefined;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const KINDS = new Set<string>(Object.values(REPLY_KINDS));

/** Sends the frames of one reply. Not safe to use after `full`, `end` or `error`. */
export interface ReplyWriter {
  full(
    status: number,
    contentType: string,
    routing: string,
    body: Uint8Array,
    meta?: AnswerMeta,
  ): void;
  head(status: number, contentType: string, routing: string, meta?: AnswerMeta): void;
  chunk(data: Uint8Array): void;
  end(): void;
  error(body: ErrorBody, routing?: string): void;
}

/** The writer of a reply over the bus, which also says whether it has sent a frame yet. */
export interface BusReplyWriter extends ReplyWriter {
  started(): boolean;
  /** Sends `accept` naming `replica` (see {@link ACCEPT_REPLY_KIND}); not an answer frame. */
  accept(replica: string): void;
}

export interface ReplyWriterOptions {
  /**
   * The dispatcher replica answering, named on the first frame: the requester follows that
   * replica's liveness from then on without a separate `accept` message.
   */
  replica?: string;
  /**
   * The request's `Zml-Reply-Batch` header: frames go in frame batches to this subject. It
   * is used only when it is a sibling of the reply subject (the same subject up to the last
   * token, which is `REPLY_BATCH.token`), so a request can never steer its answer elsewhere.
   */
  batchSubject?: string;
}

/** `batchSubject` when it names the batch subject beside `replySubject`, else undefined. */
export function siblingBatchSubject(
  replySubject: string,
  batchSubject: string | undefined,
): string | undefined {
  if (!batchSubject) return undefined;
  const parent = replySubject.lastIndexOf(".");
  if (parent <= 0 || batchSubject.length !== parent + 1 + REPLY_BATCH.token.length) {
    return undefined;
  }
  return batchSubject.startsWith(replySubject.slice(0, parent + 1)) &&
    batchSubject.endsWith(REPLY_BATCH.token)
    ? batchSubject
    : undefined;
}

/** See `createReplyWriter`: batch subjects, one instance each. */
const batchSubjects = createInterner();

type Meta = ReadonlyArray<readonly [string, string]>;
const NO_META: Meta = [];

/** Room left in each frame for its NATS headers (status, routing, sequence, trace). */
const FRAME_HEADER_ROOM = 16 * 1024;

/**
 * The largest body one frame may carry on this connection: the server's `max_payload` less
 * room for headers. Answers larger than that travel as `head`, several `chunk`s and `end`,
 * so `max_payload` never limits what a node may answer.
 */
function frameBodyLimit(maxPayload: number | undefined): number {
  return Math.max(1024, (maxPayload ?? 1024 * 1024) - FRAME_HEADER_ROOM);
}

export function createReplyWriter(
  bus: Bus,
  replySubject: string,
  options: ReplyWriterOptions = {},
): BusReplyWriter {
  const nc = natsConnectionOf(bus);
  const limit = frameBodyLimit(nc.info?.max_payload);
  const publisher = turnPublisherOf(nc);
  // The batch subject is looked up in the publisher's open batches for every frame: one
  // instance for all the requests of a requester makes that lookup a pointer comparison.
  const sibling = siblingBatchSubject(replySubject, options.batchSubject);
  const batchSubject = sibling === undefined ? undefined : batchSubjects(sibling);
  const id = replySubject.slice(replySubject.lastIndexOf(".") + 1);
  let seq = 0;
  /** The last frame queued into a batch (a chunk of it may take more bytes this turn). */
  let last: QueuedFrame | undefined;
  const frame = (kind: ReplyKind, data: Uint8Array, meta: Meta) => {
    const named: Meta =
      seq === 0 && options.replica ? [...meta, [HEADERS.dispatcher, options.replica]] : meta;
    if (batchSubject !== undefined) {
      last = publisher.frame(batchSubject, {
        id,
        kind,
        seq: seq++,
        headers: named,
        meta: encodeMeta(named),
        pieces: data.byteLength > 0 ? [data] : [],
        bytes: data.byteLength,
        batch: undefined,
      });
      return;
    }
    const hdrs = natsHeaders();
    for (const [name, value] of named) hdrs.set(name, value);
    hdrs.set(HEADERS.replyKind, kind);
    hdrs.set(HEADERS.seq, String(seq++));
    publisher.publish(replySubject, data, { headers: hdrs });
  };
  const described = (
    status: number,
    contentType: string,
    routing: string,
    meta?: AnswerMeta,
  ): Meta => {
    const pairs: Array<[string, string]> = [
      [HEADERS.status, String(status)],
      [HEADERS.contentType, contentType],
    ];
    if (routing) pairs.push([HEADERS.routing, routing]);
    if (meta?.nodeMs !== undefined) pairs.push([HEADERS.nodeMs, meta.nodeMs.toFixed(3)]);
    if (meta?.retryAfterS !== undefined) {
      pairs.push([HEADERS.retryAfter, String(meta.retryAfterS)]);
    }
    return pairs;
  };
  const chunks = (data: Uint8Array) => {
    for (let at = 0; at < data.byteLength; at += limit) {
      const piece = at === 0 && data.byteLength <= limit ? data : data.subarray(at, at + limit);
      // Events of one stream that arrive within one turn go as one frame.
      if (last?.kind === REPLY_KINDS.chunk && piece.byteLength + last.bytes <= limit) {
        if (publisher.extend(last, piece)) continue;
      }
      frame(REPLY_KINDS.chunk, piece, NO_META);
    }
  };
  return {
    full: (status, contentType, routing, body, meta) => {
      if (body.byteLength <= limit) {
        frame(REPLY_KINDS.full, body, described(status, contentType, routing, meta));
        return;
      }
      frame(REPLY_KINDS.head, EMPTY, described(status, contentType, routing, meta));
      chunks(body);
      frame(REPLY_KINDS.end, EMPTY, NO_META);
    },
    head: (status, contentType, routing, meta) =>
      frame(REPLY_KINDS.head, EMPTY, described(status, contentType, routing, meta)),
    chunk: chunks,
    end: () => frame(REPLY_KINDS.end, EMPTY, NO_META),
    error: (body, routing) => {
      const meta: Meta = routing ? [[HEADERS.routing, routing]] : NO_META;
      frame(REPLY_KINDS.error, encoder.encode(JSON.stringify(body)), meta);
    },
    started: () => seq > 0,
    accept: (replica) => {
      if (batchSubject !== undefined) {
        const headers: Meta = [[HEADERS.dispatcher, replica]];
        const meta = encodeMeta(headers);
        publisher.frame(batchSubject, {
          id,
          kind: "accept",
          seq: 0,
          headers,
          meta,
          pieces: [],
          bytes: 0,
          batch: undefined,
        });
        return;
      }
      const h = natsHeaders();
      h.set(HEADERS.replyKind, ACCEPT_REPLY_KIND);
      h.set(HEADERS.dispatcher, replica);
      publisher.publish(replySubject, EMPTY, { headers: h });
    },
  };
}

const EMPTY = new Uint8Array(0);

/**
 * Tells requesters which dispatcher replica took their request when its answer is slow to
 * start. A request answered within `afterMs` needs no `accept` message: its first frame names
 * the replica (see `ReplyWriterOptions.replica`). One shared timer serves every request.
 */
export interface AcceptAnnouncer {
  /** Follows one request until its writer sends a frame; call the returned function when it ends. */
  track(replySubject: string, writer: BusReplyWriter): () => void;
  stop(): void;
}

export function createAcceptAnnouncer(
  bus: Bus,
  options: { replica: string; afterMs: number; clock?: () => number },
): AcceptAnnouncer {
  const clock = options.clock ?? Date.now;
  const waiting = new Map<string, { writer: BusReplyWriter; since: number }>();
  // Runs only while some request waits: an idle dispatcher has no timer to wake it.
  let timer: NodeJS.Timeout | undefined;
  const sweep = () => {
    const now = clock();
    for (const [replySubject, w] of waiting) {
      if (w.writer.started()) waiting.delete(replySubject);
      else if (now - w.since >= options.afterMs) {
        waiting.delete(replySubject);
        if (bus.isConnected()) w.writer.accept(options.replica);
      }
    }
    if (waiting.size === 0) stop();
  };
  const stop = () => {
    clearInterval(timer);
    timer = undefined;
  };
  return {
    track(replySubject, writer) {
      waiting.set(replySubject, { writer, since: clock() });
      if (timer === undefined) {
        timer = setInterval(sweep, Math.max(1, Math.floor(options.afterMs / 2)));
        timer.unref();
      }
      return () => waiting.delete(replySubject);
    },
    stop() {
      stop();
      waiting.clear();
    },
  };
}

/**
 * Publishes in the order of this connection's route requests and reply frames (see
 * `turn-publisher.ts`): a `route.cancel` never overtakes the request it cancels.
 */
export function publishInRouteOrder(
  bus: Bus,
  subject: string,
  data: Uint8Array,
  headers: MsgHdrs,
): void {
  turnPublisherOf(natsConnectionOf(bus)).publish(subject, data, { headers });
}

/** Decodes the ErrorBody of an `error` frame, tolerating a malformed one. */
export function errorOfFrame(frame: RouteFrame): ZmlError {
  try {
    const body = JSON.parse(decoder.decode(frame.data)) as ErrorBody;
    if (typeof body.code === "string" && typeof body.message === "string") {
      return ZmlError.fromBody(body);
    }
  } catch {
    // fall through to the generic error below
  }
  return new ZmlError("internal_error", "malformed error reply from dispatcher");
}

export interface PendingReply {
  /**
   * The reply subject the request was published with; it identifies the request to the
   * dispatcher serving it (e.g. in a `route.cancel` message).
   */
  readonly inbox: string;
  /** Stops delivering frames for this request (e.g. the client went away). */
  cancel(): void;
}

export interface MuxRequestOptions {
  /** Fails the request when no frame arrives for this long. */
  idleTimeoutMs: number;
}

/**
 * Many concurrent route requests over one wildcard inbox subscription, demultiplexed by the
 * last inbox token: one SUB per process instead of one per request. Frames are checked for
 * gaps; a gap, a timeout, no responders or a lost connection end the request with an
 * `error` frame, never with silence.
 */
export interface ReplyMux {
  request(
    subject: string,
    data: Uint8Array,
    headers: MsgHdrs,
    onFrame: (frame: RouteFrame) => void,
    options: MuxRequestOptions,
  ): PendingReply;
  /** Ends every pending request with the given error (used on disconnect). */
  failAll(error: ZmlError): void;
  /**
   * Ends every pending request the named dispatcher replica accepted with the given error
   * (that replica is gone); returns how many there were.
   */
  failServedBy(replica: string, error: ZmlError): number;
  /**
   * Ends every pending request that no dispatcher has accepted (no `accept` frame, no frame
   * at all) within `withinMs` of being sent: the request was lost on the way (a nats-server
   * or the dispatcher that got it died before accepting), so waiting longer only reaches the
   * timeout. Returns how many there were.
   */
  failUnaccepted(withinMs: number, error: ZmlError): number;
  pendingCount(): number;
  close(): void;
}

export interface ReplyMuxOptions {
  /**
   * Called with the replica named by an `accept` or a first frame, and again with it for
   * every later frame of that request (once per frame batch): each is a sign of the
   * replica's life, so a replica busy streaming an answer is never taken for dead because
   * its beat waits behind its own frames.
   */
  onAccept?: (replica: string) => void;
}

interface Pending {
  onFrame: (frame: RouteFrame) => void;
  /** The dispatcher replica serving the request, once its `accept` or first frame arrived. */
  servedBy: string | undefined;
  sentAt: number;
  nextSeq: number;
  /**
   * The idle check: it fires `idleTimeoutMs` after it was set and looks at `lastFrameAt`,
   * setting itself again for the rest of the wait when a frame came since. A frame only
   * notes its time, instead of moving a timer in Node's timer lists for every token.
   */
  timer: NodeJS.Timeout;
  /** When the last frame (or the request) went past; see `timer`. */
  lastFrameAt: number;
  idleTimeoutMs: number;
}

/** Replies arrive under the bus's own inbox prefix, where only its identity may subscribe. */
export function createReplyMux(bus: Bus, options: ReplyMuxOptions = {}): ReplyMux {
  const nc = natsConnectionOf(bus);
  const publisher = turnPublisherOf(nc);
  const prefix = createInbox(bus.inboxPrefix);
  /** Where dispatchers may send this process's frames as batches (`REPLY_BATCH`). */
  const batchSubject = `${prefix}.${REPLY_BATCH.token}`;
  const pending = new Map<string, Pending>();
  let counter = 0;
  /**
   * When the message being handled arrived, read once per message: every frame of a batch
   * arrived together.
   */
  let arrivedAt = 0;

  const finish = (id: string, p: Pending, frame: RouteFrame) => {
    clearTimeout(p.timer);
    pending.delete(id);
    p.onFrame(frame);
  };
  const failOne = (id: string, p: Pending, error: ZmlError) =>
    finish(id, p, errorFrame(error, p.nextSeq));

  /**
   * Replica names, one instance each: a batch compares each frame's request's replica with
   * the one before it (see `onBatch`).
   */
  const replicaNames = createInterner();

  /** An `accept`, or a first frame, names the replica serving the request. */
  const accepted = (p: Pending, replica: string) => {
    if (!replica) return;
    p.servedBy = replicaNames(replica);
    options.onAccept?.(replica);
  };

  /**
   * One answer frame of request `id` (null: it could not be read). `signOfLife`: tell
   * `onAccept` of the serving replica now (a batch does it once for all its frames).
   */
  const deliver = (
    id: string,
    p: Pending,
    frame: RouteFrame | null,
    replica: string,
    signOfLife = true,
  ) => {
    if (!frame || frame.seq !== p.nextSeq) {
      failOne(id, p, new ZmlError("stream_interrupted", "reply frames arrived out of order"));
      return;
    }
    p.nextSeq++;
    p.lastFrameAt = arrivedAt;
    // A request answered quickly gets no `accept`: its first frame names the replica.
    if (p.servedBy === undefined) p.servedBy = replica ? replicaNames(replica) : undefined;
    if (signOfLife && p.servedBy !== undefined) options.onAccept?.(p.servedBy);
    if (frame.kind === "full" || frame.kind === "end" || frame.kind === "error") {
      finish(id, p, frame);
      return;
    }
    p.onFrame(frame);
  };

  /** The idle check of request `id` (see `Pending.timer`). */
  const idleCheck = (id: string, p: Pending) => {
    if (pending.get(id) !== p) return;
    const quietMs = Date.now() - p.lastFrameAt;
    if (quietMs < p.idleTimeoutMs) {
      p.timer = setTimeout(idleCheck, p.idleTimeoutMs - quietMs, id, p);
      return;
    }
    failOne(id, p, new ZmlError("gateway_timeout", "no reply from the dispatcher in time"));
  };

  const onMessage = (msg: Msg) => {
    arrivedAt = Date.now();
    const id = msg.subject.slice(prefix.length + 1);
    if (id === REPLY_BATCH.token) {
      onBatch(msg);
      return;
    }
    const p = pending.get(id);
    if (!p) return; // late frame of a cancelled or timed-out request
    try {
      decodeHeadersOf(msg);
    } catch {
      failOne(id, p, new ZmlError("stream_interrupted", "a reply frame had malformed headers"));
      return;
    }
    if (headerOf(msg.headers, HEADERS.replyKind) === ACCEPT_REPLY_KIND) {
      accepted(p, headerOf(msg.headers, HEADERS.dispatcher));
      return;
    }
    if (msg.headers?.hasError && msg.headers.code === 503) {
      failOne(id, p, new ZmlError("bus_unavailable", "no dispatcher is serving route requests"));
      return;
    }
    deliver(id, p, decodeFrame(msg), headerOf(msg.headers, HEADERS.dispatcher));
  };

  /**
   * A frame batch: each frame goes to its request in the batch's order, as if it had come
   * alone. A batch that cannot be read ends every request it names with an error; one whose
   * table of contents is cut short names only some, and the others learn of the loss from
   * their next frame (a gap) or their idle timeout, never by silence.
   */
  const onBatch = (msg: Msg) => {
    const batch = decodeFrameBatch(msg.data);
    if (!batch.ok) {
      const error = new ZmlError(
        "stream_interrupted",
        `a reply frame batch was unreadable: ${batch.error}`,
      );
      for (const id of new Set(batch.ids)) {
        const p = pending.get(id);
        if (p) failOne(id, p, error);
      }
      return;
    }
    /** The replica serving the batch's last request: one connection's batch, one replica. */
    let servedBy: string | undefined;
    const frames = batch.frames;
    for (let i = 0; i < frames.length; i++) {
      const f = frames[i]!;
      const p = pending.get(f.id);
      if (!p) continue; // a cancelled or timed-out request, or one that failed in this batch
      try {
        if (f.kind === "accept") accepted(p, f.meta.get(HEADERS.dispatcher) ?? "");
        else {
          deliver(f.id, p, batchedFrame(f), f.meta.get(HEADERS.dispatcher) ?? "", false);
          if (p.servedBy !== undefined && p.servedBy !== servedBy) {
            servedBy = p.servedBy;
            options.onAccept?.(servedBy);
          }
        }
      } catch (err) {
        // One request's handler failing must not cost the others in the batch their frames.
        if (pending.get(f.id) === p) {
          failOne(
            f.id,
            p,
            new ZmlError("internal_error", `relaying a reply frame failed: ${String(err)}`),
          );
        }
      }
    }
  };

  const sub: Subscription = nc.subscribe(`${prefix}.*`, {
    callback: (err, msg) => {
      if (!err) onMessage(msg);
    },
  });

  return {
    request(subject, data, headers, onFrame, options) {
      const id = (counter++).toString(36);
      const sentAt = Date.now();
      const p: Pending = {
        onFrame,
        servedBy: undefined,
        sentAt,
        nextSeq: 0,
        idleTimeoutMs: options.idleTimeoutMs,
        lastFrameAt: sentAt,
        timer: setTimeout(() => idleCheck(id, p), options.idleTimeoutMs),
      };
      pending.set(id, p);
      const inbox = `${prefix}.${id}`;
      headers.set(HEADERS.replyBatch, batchSubject);
      publisher.publish(subject, data, { headers, reply: inbox }, () => {
        const current = pending.get(id);
        if (current === p) failOne(id, p, new ZmlError("bus_unavailable", "message bus closed"));
      });
      return {
        inbox,
        cancel() {
          clearTimeout(p.timer);
          pending.delete(id);
        },
      };
    },
    failAll(error) {
      for (const [id, p] of pending) failOne(id, p, error);
    },
    failServedBy(replica, error) {
      let failed = 0;
      for (const [id, p] of pending) {
        if (p.servedBy !== replica) continue;
        failOne(id, p, error);
        failed++;
      }
      return failed;
    },
    failUnaccepted(withinMs, error) {
      const sentBefore = Date.now() - withinMs;
      let failed = 0;
      for (const [id, p] of pending) {
        if (p.servedBy !== undefined || p.nextSeq > 0 || p.sentAt >= sentBefore) continue;
        failOne(id, p, error);
        failed++;
      }
      return failed;
    },
    pendingCount: () => pending.size,
    close() {
      sub.unsubscribe();
      for (const p of pending.values()) clearTimeout(p.timer);
      pending.clear();
    },
  };
}

function decodeFrame(msg: Msg): RouteFrame | null {
  const h = msg.headers;
  const kind = headerOf(h, HEADERS.replyKind);
  const seq = Number(headerOf(h, HEADERS.seq));
  if (!h || !kind || !KINDS.has(kind) || !Number.isInteger(seq)) return null;
  return frameOf(kind as ReplyKind, seq, (name) => headerOf(h, name), msg.data);
}

/** A frame out of a batch, read as {@link decodeFrame} reads one sent alone. */
function batchedFrame(f: IncomingFrame): RouteFrame | null {
  if (f.kind === "accept") return null;
  // Most frames are chunks, which carry no meta: nothing to look up.
  if (f.meta.size === 0) {
    return {
      kind: f.kind,
      seq: f.seq,
      status: undefined,
      nodeMs: undefined,
      contentType: undefined,
      routing: undefined,
      retryAfterS: undefined,
      data: f.data,
    };
  }
  return frameOf(f.kind, f.seq, (name) => f.meta.get(name) ?? "", f.data);
}

function frameOf(
  kind: ReplyKind,
  seq: number,
  header: (name: string) => string,
  data: Uint8Array,
): RouteFrame {
  const status = header(HEADERS.status);
  const nodeMs = header(HEADERS.nodeMs);
  const retryAfter = header(HEADERS.retryAfter);
  return {
    kind,
    seq,
    status: status ? Number(status) : undefined,
    nodeMs: nodeMs ? Number(nodeMs) : undefined,
    contentType: header(HEADERS.contentType) || undefined,
    routing: header(HEADERS.routing) || undefined,
    retryAfterS: /^\d{1,9}$/.test(retryAfter) ? Number(retryAfter) : undefined,
    data,
  };
}

function errorFrame(error: ZmlError, seq: number): RouteFrame {
  return {
    kind: REPLY_KINDS.error,
    seq,
    status: undefined,
    nodeMs: undefined,
    contentType: "application/json",
    routing: undefined,
    retryAfterS: undefined,
    data: encoder.encode(JSON.stringify(error.toBody())),
  };
}
