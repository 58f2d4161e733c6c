import type { IncomingHttpHeaders } from "node:http";
import type { Dispatcher } from "undici";
import type { NodeDispatcher, NodeDispatchOptions } from "./http1/http1-pool.ts";

/**
 * A node's answer, read through a pool's `dispatch()` (undici's, or the plain-HTTP/1.1 pool's
 * with the same handler calls) with a handler of its own rather than undici's `request()`.
 * `request()` wraps every answer in a `Readable`, and a stream pays that machinery (push, the
 * buffer's bookkeeping, a `data` event, a resume) for every chunk: a token each. Here each
 * chunk goes from the pool's parser straight to the reader's callback.
 */
export interface NodeAnswer {
  statusCode: number;
  headers: IncomingHttpHeaders;
  body: AnswerBody;
}

/** The body of a {@link NodeAnswer}. Read it once, with one of the four. */
export interface AnswerBody {
  /**
   * Hands each chunk to `onChunk` as it arrives, until `onChunk` returns false or the body
   * ends; rejects when the body fails or the call is cut. When `onChunk` returns false the
   * rest of the body is dropped, and its connection with it.
   */
  each(onChunk: (chunk: Buffer) => boolean): Promise<void>;
  /** The whole body. */
  bytes(): Promise<Uint8Array>;
  /**
   * Reads the body to its end and discards it, so the connection can serve another call; a
   * body longer than {@link DUMP_LIMIT_BYTES} is dropped with its connection instead.
   */
  dump(): Promise<void>;
  /** Drops the body unread, and its connection. */
  destroy(): void;
}

export interface NodeRequest extends NodeDispatchOptions {
  /** Cuts the call at once, whatever phase it is in. */
  signal: AbortSignal;
}

/** Most bytes {@link AnswerBody.dump} reads before it drops the connection instead. */
export const DUMP_LIMIT_BYTES = 128 * 1024;

/**
 * Sends a request and resolves with the answer's status and headers; rejects as `request()`
 * does (a network error, a timeout, the signal's reason). The signal settles the promise at
 * once even while the request waits for a connection; the request itself is then cut when
 * the pool starts it.
 */
export function requestNode(pool: NodeDispatcher, req: NodeRequest): Promise<NodeAnswer> {
  return new Promise((resolve, reject) => {
    const handler = new AnswerHandler(req.signal, resolve, reject);
    if (handler.failed !== null) return;
    pool.dispatch(
      {
        path: req.path,
        method: req.method,
        headers: req.headers,
        body: req.body,
        headersTimeout: req.headersTimeout,
        bodyTimeout: req.bodyTimeout,
      },
      handler,
    );
  });
}

const ABORTED = (signal: AbortSignal): Error =>
  signal.reason instanceof Error
    ? signal.reason
    : Object.assign(new Error("the node call was aborted"), { name: "AbortError" });

type ChunkReader = (chunk: Buffer) => boolean;

/**
 * One call's handler and its answer's body. Chunks that come before a reader is attached (the
 * answer's promise resolves on a later microtask) are held, and the connection paused until
 * the reader comes.
 */
class AnswerHandler implements Dispatcher.DispatchHandler, AnswerBody {
  private controller: Dispatcher.DispatchController | null = null;
  /** The error that ended the call, once it ended in one. */
  failed: Error | null = null;
  private started = false;
  private ended = false;
  private reader: ChunkReader | null = null;
  private held: Buffer[] = [];
  private settleBody: ((err: Error | null) => void) | null = null;
  private readonly onAbort: () => void;
  private readonly signal: AbortSignal;
  private resolveStart: ((answer: NodeAnswer) => void) | null;
  private rejectStart: ((err: Error) => void) | null;

  constructor(
    signal: AbortSignal,
    resolveStart: (answer: NodeAnswer) => void,
    rejectStart: (err: Error) => void,
  ) {
    this.signal = signal;
    this.resolveStart = resolveStart;
    this.rejectStart = rejectStart;
    this.onAbort = () => this.cut(ABORTED(signal));
    if (signal.aborted) this.cut(ABORTED(signal));
    else signal.addEventListener("abort", this.onAbort, { once: true });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.failed !== null) controller.abort(this.failed);
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void {
    if (statusCode < 200 || this.failed !== null) return; // 1xx: the answer is still to come
    this.started = true;
    const resolve = this.resolveStart;
    this.resolveStart = null;
    this.rejectStart = null;
    resolve?.({ statusCode, headers, body: this });
    if (this.reader === null) controller.pause();
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.failed !== null || this.ended) return;
    const reader = this.reader;
    if (reader === null) {
      this.held.push(chunk);
      return;
    }
    if (!reader(chunk)) this.stop();
  }

  onResponseEnd(): void {
    if (this.failed !== null || this.ended) return;
    this.ended = true;
    this.signal.removeEventListener("abort", this.onAbort);
    if (this.reader !== null) this.finish(null);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.cut(err, false);
  }

  each(onChunk: ChunkReader): Promise<void> {
    if (this.reader !== null) return Promise.reject(new Error("the body is already read"));
    return new Promise((resolve, reject) => {
      this.settleBody = (err) => (err ? reject(err) : resolve());
      this.reader = onChunk;
      for (const chunk of this.held.splice(0)) {
        if (this.failed !== null || this.reader === null) break;
        if (!onChunk(chunk)) {
          this.stop();
          return;
        }
      }
      if (this.failed !== null) this.finish(this.failed);
      else if (this.ended) this.finish(null);
      else this.controller?.resume();
    });
  }

  async bytes(): Promise<Uint8Array> {
    const chunks: Buffer[] = [];
    let size = 0;
    await this.each((chunk) => {
      chunks.push(chunk);
      size += chunk.length;
      return true;
    });
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  }

  async dump(): Promise<void> {
    let size = 0;
    await this.each((chunk) => (size += chunk.length) <= DUMP_LIMIT_BYTES);
  }

  destroy(): void {
    if (this.ended || this.failed !== null) return;
    this.stop();
  }

  /** The reader wants no more: the rest of the body is dropped with its connection. */
  private stop(): void {
    this.ended = true;
    this.held = [];
    this.signal.removeEventListener("abort", this.onAbort);
    const reason = Object.assign(new Error("the answer's body was dropped"), {
      name: "AbortError",
    });
    this.failed = reason;
    this.controller?.abort(reason);
    this.finish(null);
  }

  /**
   * Ends the call with `err`: whoever waits learns of it. `drop`: cut the request at undici
   * too (the signal fired); undici's own error has ended it already.
   */
  private cut(err: Error, drop = true): void {
    if (this.failed !== null) return;
    this.failed = err;
    this.held = [];
    this.signal.removeEventListener("abort", this.onAbort);
    const reject = this.rejectStart;
    this.resolveStart = null;
    this.rejectStart = null;
    reject?.(err);
    if (drop && this.controller !== null) this.controller.abort(err);
    if (this.started && !this.ended) this.finish(err);
  }

  private finish(err: Error | null): void {
    const settle = this.settleBody;
    this.settleBody = null;
    this.reader = null;
    settle?.(err);
  }
}
