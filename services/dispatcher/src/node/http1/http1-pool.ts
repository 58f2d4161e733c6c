import type { IncomingHttpHeaders } from "node:http";
import type { OnReadOpts, Socket } from "node:net";
import { performance } from "node:perf_hooks";
import type { Dispatcher } from "undici";
import { hasControlChar, ResponseParser, TOKEN } from "./response-parser.ts";
import type { ResponseHead, ResponseSink } from "./response-parser.ts";

/**
 * Keep-alive HTTP/1.1 connections to one plain-HTTP node, for the dispatcher's calls.
 *
 * Why not undici here: a streamed answer is a read per token, and undici reads its socket as
 * a Node stream (a 64 KiB allocation per read, the readable's push and `readable` event, its
 * parser's copy into WebAssembly memory) before its parser hands the bytes on. This pool
 * reads each socket with `onread` into one reused buffer, parses each read there
 * (response-parser.ts), and copies out only the body's pieces. It speaks to the answer's
 * handler as undici does (the same `DispatchHandler` calls), so `requestNode` takes either;
 * TLS and HTTP/2 nodes stay on undici.
 *
 * What it keeps of undici's pool: at most `connections` sockets, calls queued beyond them,
 * idle sockets kept for `keepAliveTimeoutMs` or less when the node says it keeps them less
 * (`Keep-Alive: timeout=N`, less a second for the race), a socket dropped whenever an answer
 * is cut, malformed, or followed by bytes nobody asked for, and a body idle timeout.
 */
export interface NodeDispatchOptions {
  path: string;
  method: "POST" | "GET" | "DELETE";
  headers: Record<string, string>;
  body: Uint8Array | null;
  /** Most ms from the request's start to the answer's head; 0 for none. */
  headersTimeout: number;
  /** Most ms between body bytes; 0 for none. */
  bodyTimeout: number;
}

/** What `requestNode` needs of a pool: undici's `Pool` and {@link Http1Pool} both have it. */
export interface NodeDispatcher {
  dispatch(options: NodeDispatchOptions, handler: Dispatcher.DispatchHandler): boolean;
  close(): Promise<void>;
  destroy(): Promise<void>;
}

export interface Http1PoolOptions {
  /** The node's origin, `http://host:port`. */
  origin: string;
  connections: number;
  connectTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** Opens a socket to the node (the node address policy applies here); may throw. */
  dial(options: { host: string; port: number; onread: OnReadOpts }): Socket;
}

/** A node call that failed in this pool; `code` says how (`classify` reads it). */
export class NodeCallError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "NodeCallError";
    this.code = code;
  }
}

/**
 * Every socket of every pool reads into this one buffer: reads run one at a time on this
 * thread, and each is parsed, and its body pieces copied out, before the next, so no read
 * can overwrite bytes still used.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);
/** Less than this left of a node's keep-alive hint, and a socket is not kept. */
const KEEP_ALIVE_MARGIN_MS = 1_000;
/** Headers the pool frames itself, refused from a caller as undici refuses them. */
const FRAMING = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "expect",
]);

export class Http1Pool implements NodeDispatcher {
  private readonly options: Http1PoolOptions;
  private readonly host: string;
  private readonly hostname: string;
  private readonly port: number;
  private readonly open = new Set<Connection>();
  private readonly idle: Connection[] = [];
  private readonly queue: Call[] = [];
  private closing: (() => void) | null = null;
  private closed: Promise<void> | null = null;

  constructor(options: Http1PoolOptions) {
    const url = new URL(options.origin);
    if (url.protocol !== "http:")
      throw new Error(`Http1Pool speaks plain http only, not ${url.protocol}`);
    this.options = options;
    this.host = url.host;
    this.hostname = url.hostname.replace(/^\[|\]$/g, "");
    this.port = url.port === "" ? 80 : Number(url.port);
  }

  dispatch(options: NodeDispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    const call = new Call(this, options, handler);
    handler.onRequestStart?.(call.controller, {});
    if (call.done) return true;
    let head: string;
    try {
      head = requestHead(this.host, options);
    } catch (err) {
      call.fail(err as Error);
      return true;
    }
    if (this.closed !== null) {
      call.fail(new NodeCallError("ZML_NODE_POOL_CLOSED", "the node's pool is closed"));
      return true;
    }
    call.head = head;
    this.assign(call);
    return true;
  }

  /** Serves what was dispatched, then closes every socket. */
  close(): Promise<void> {
    if (this.closed === null) {
      this.closed = new Promise((resolve) => (this.closing = resolve));
      this.settleClose();
    }
    return this.closed;
  }

  /** Fails every call and closes every socket at once. */
  async destroy(): Promise<void> {
    const gone = new NodeCallError("ZML_NODE_POOL_CLOSED", "the node's pool was destroyed");
    for (const call of this.queue.splice(0)) call.fail(gone);
    for (const conn of [...this.open]) conn.destroy(gone);
    await this.close();
  }

  /** A connection finished its call and may take another. */
  release(conn: Connection): void {
    const next = this.queue.shift();
    if (next !== undefined) conn.start(next);
    else if (this.closed !== null) conn.destroy(null);
    else {
      this.idle.push(conn);
      conn.idleFor(this.options.keepAliveTimeoutMs);
    }
  }

  /** A connection is gone: a queued call, if any, gets a new one. */
  forget(conn: Connection): void {
    this.open.delete(conn);
    const at = this.idle.indexOf(conn);
    if (at !== -1) this.idle.splice(at, 1);
    const next = this.queue.shift();
    if (next !== undefined) this.assign(next);
    this.settleClose();
  }

  unqueue(call: Call): void {
    const at = this.queue.indexOf(call);
    if (at !== -1) this.queue.splice(at, 1);
    this.settleClose();
  }

  private assign(call: Call): void {
    const idle = this.idle.pop();
    if (idle !== undefined) {
      idle.start(call);
      return;
    }
    if (this.open.size >= this.options.connections) {
      this.queue.push(call);
      return;
    }
    const conn = new Connection(this);
    this.open.add(conn);
    try {
      conn.connect(this.options, this.hostname, this.port);
    } catch (err) {
      this.open.delete(conn);
      call.fail(err as Error);
      return;
    }
    conn.start(call);
  }

  private settleClose(): void {
    if (this.closed === null) return;
    for (const conn of this.idle.splice(0)) conn.destroy(null);
    if (this.open.size === 0 && this.queue.length === 0) this.closing?.();
  }
}

/** The handle a handler gets: undici's `DispatchController`, on one call. */
class CallController implements Dispatcher.DispatchController {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  private readonly call: Call;

  constructor(call: Call) {
    this.call = call;
  }

  abort(reason: Error): void {
    this.call.fail(reason);
  }

  pause(): void {
    this.paused = true;
    this.call.conn?.pause();
  }

  resume(): void {
    this.paused = false;
    this.call.conn?.resume();
  }
}

/** One request and its answer, from dispatch to end or failure. */
class Call {
  readonly controller: CallController;
  conn: Connection | null = null;
  head = "";
  done = false;
  /** When the last body bytes came, for the body idle timeout. */
  lastBodyAt = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly pool: Http1Pool;
  private readonly options: NodeDispatchOptions;
  private readonly handler: Dispatcher.DispatchHandler;

  constructor(pool: Http1Pool, options: NodeDispatchOptions, handler: Dispatcher.DispatchHandler) {
    this.pool = pool;
    this.options = options;
    this.handler = handler;
    this.controller = new CallController(this);
  }

  /** Sends the request on `conn`. */
  sendOn(conn: Connection, socket: Socket): void {
    this.conn = conn;
    const body = this.options.body;
    socket.cork();
    socket.write(this.head, "latin1");
    if (body !== null && body.byteLength > 0) socket.write(body);
    socket.uncork();
    if (this.options.headersTimeout > 0) {
      this.timer = setTimeout(
        () =>
          this.fail(
            new NodeCallError("ZML_NODE_HEADERS_TIMEOUT", "the node sent no answer head in time"),
          ),
        this.options.headersTimeout,
      );
    }
    if (this.controller.paused) conn.pause();
  }

  onHead(head: ResponseHead): void {
    this.clearTimer();
    if (this.options.bodyTimeout > 0) {
      this.lastBodyAt = performance.now();
      this.timer = setTimeout(this.checkBodyIdle, this.options.bodyTimeout);
    }
    this.handler.onResponseStart?.(
      this.controller,
      head.statusCode,
      head.headers,
      head.statusMessage,
    );
  }

  onBody(piece: Buffer): void {
    this.lastBodyAt = performance.now();
    this.handler.onResponseData?.(this.controller, piece);
  }

  onEnd(): void {
    this.done = true;
    this.clearTimer();
    this.conn = null; // the socket may serve another call now: no pause or resume reaches it
    this.handler.onResponseEnd?.(this.controller, NO_TRAILERS);
  }

  /** Ends the call with `err`, once; its socket, if it has one, goes with it. */
  fail(err: Error): void {
    if (this.done) return;
    this.done = true;
    this.clearTimer();
    this.controller.aborted = true;
    this.controller.reason = err;
    const conn = this.conn;
    this.conn = null;
    if (conn !== null) conn.destroy(null);
    else this.pool.unqueue(this);
    this.handler.onResponseError?.(this.controller, err);
  }

  /** Re-armed for what is left of the limit while bytes keep coming; fails it once exceeded. */
  private readonly checkBodyIdle = (): void => {
    const idle = performance.now() - this.lastBodyAt;
    const limit = this.options.bodyTimeout;
    if (idle < limit) {
      this.timer = setTimeout(this.checkBodyIdle, Math.ceil(limit - idle));
      return;
    }
    this.timer = null;
    this.fail(new NodeCallError("ZML_NODE_BODY_TIMEOUT", `no answer bytes for ${limit} ms`));
  };

  private clearTimer(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}

const NO_TRAILERS: IncomingHttpHeaders = Object.freeze({});

/** One socket to the node, carrying one call at a time. */
class Connection implements ResponseSink {
  private socket: Socket | null = null;
  private call: Call | null = null;
  private readonly parser = new ResponseParser(this);
  /** Whether the current answer lets the socket be reused, and for how long the node says. */
  private reusable = false;
  private keepAliveHintMs: number | undefined;
  /** The current call's answer ended; the socket goes back to the pool after this read. */
  private ended = false;
  /** Runs while the socket connects. */
  private connectTimer: NodeJS.Timeout | null = null;
  /** Runs while the socket is idle: the keep-alive limit. */
  private idleTimer: NodeJS.Timeout | null = null;
  private gone = false;
  private readonly pool: Http1Pool;

  constructor(pool: Http1Pool) {
    this.pool = pool;
  }

  connect(options: Http1PoolOptions, host: string, port: number): void {
    const socket = options.dial({
      host,
      port,
      onread: { buffer: READ_BUFFER, callback: this.onRead },
    });
    this.socket = socket;
    socket.setNoDelay(true);
    this.connectTimer = setTimeout(
      () =>
        this.destroy(
          new NodeCallError(
            "ZML_NODE_CONNECT_TIMEOUT",
            "the node did not accept a connection in time",
          ),
        ),
      options.connectTimeoutMs,
    );
    socket.once("connect", () => this.clearTimers());
    socket.on("end", this.onSocketEnd);
    socket.on("error", (err) => this.destroy(err));
    socket.on("close", () => this.destroy(null));
  }

  start(call: Call): void {
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.call = call;
    this.ended = false;
    this.parser.reset();
    call.sendOn(this, this.socket!);
  }

  /** Kept idle for `ms`, or less as the node's keep-alive hint says. */
  idleFor(ms: number): void {
    const hinted =
      this.keepAliveHintMs === undefined ? ms : this.keepAliveHintMs - KEEP_ALIVE_MARGIN_MS;
    const keepMs = Math.min(ms, hinted);
    if (keepMs <= 0) {
      this.destroy(null);
      return;
    }
    this.idleTimer = setTimeout(() => this.destroy(null), keepMs);
    this.idleTimer.unref();
  }

  /** Whether a handler paused reading; undone when its call ends, so the next one reads. */
  private paused = false;

  pause(): void {
    this.paused = true;
    this.socket?.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.socket?.resume();
  }

  /**
   * Closes the socket; a call still on it fails with `err`, or, without one, with the node
   * having closed the connection. Once only.
   */
  destroy(err: Error | null): void {
    if (this.gone) return;
    this.gone = true;
    this.clearTimers();
    this.socket?.destroy();
    const call = this.call;
    this.call = null;
    call?.fail(err ?? closedEarly());
    this.pool.forget(this);
  }

  onHead(head: ResponseHead): void {
    this.reusable = head.keepAlive;
    this.keepAliveHintMs = head.keepAliveHintMs;
    this.call?.onHead(head);
  }

  onBody(data: Buffer, start: number, end: number): void {
    const call = this.call;
    if (call === null) return;
    // `data` is the shared read buffer: the answer gets its own copy of its piece.
    const piece = Buffer.allocUnsafe(end - start);
    data.copy(piece, 0, start, end);
    call.onBody(piece);
  }

  onEnd(): void {
    this.ended = true;
    const call = this.call;
    this.call = null;
    call?.onEnd();
  }

  private readonly stillWanted = (): boolean => this.call !== null && !this.call.done;

  /** Always true: `onread` stops reading on false, and a socket is paused only by `pause()`. */
  private readonly onRead = (nread: number): boolean => {
    if (this.gone) return true;
    const call = this.call;
    if (call === null) {
      // Bytes on an idle socket: nobody asked for them, so nothing after them can be trusted.
      this.destroy(null);
      return true;
    }
    let leftOver: number;
    try {
      // Parsed where it was read; `onBody` copies out what the answer keeps.
      leftOver = this.parser.execute(READ_BUFFER, nread, this.stillWanted);
    } catch (err) {
      this.destroy(err as Error);
      return true;
    }
    if (this.ended) this.afterAnswer(leftOver);
    return true;
  };

  /** The node closed its side: an answer that runs to the connection's end ends here. */
  private readonly onSocketEnd = (): void => {
    if (this.call !== null) this.parser.finish();
    this.destroy(null);
  };

  /**
   * The answer ended in this read: the socket is reused unless it must not be (bytes after
   * the answer, the node's say-so, or a request body the node answered before it was sent).
   */
  private afterAnswer(leftOver: number): void {
    this.ended = false;
    if (leftOver > 0 || !this.reusable || this.gone || this.socket!.writableLength > 0) {
      this.destroy(null);
      return;
    }
    this.resume(); // an idle socket reads too: that is how it learns the node closed it
    this.pool.release(this);
  }

  private clearTimers(): void {
    if (this.connectTimer !== null) clearTimeout(this.connectTimer);
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.connectTimer = null;
    this.idleTimer = null;
  }
}

function closedEarly(): NodeCallError {
  return new NodeCallError(
    "ZML_NODE_CLOSED",
    "the node closed the connection before its answer ended",
  );
}

/** The request line and headers, checked as undici checks them: no line breaks smuggled in. */
function requestHead(host: string, options: NodeDispatchOptions): string {
  const path = options.path;
  if (!path.startsWith("/") || /\s/.test(path) || hasControlChar(path)) {
    throw new NodeCallError("ZML_NODE_BAD_REQUEST", "invalid request path");
  }
  let head = `${options.method} ${path} HTTP/1.1\r\nhost: ${host}\r\n`;
  for (const name in options.headers) {
    const value = options.headers[name]!;
    if (!TOKEN.test(name) || FRAMING.has(name.toLowerCase()) || hasControlChar(value)) {
      throw new NodeCallError(
        "ZML_NODE_BAD_REQUEST",
        `invalid request header ${JSON.stringify(name)}`,
      );
    }
    head += `${name}: ${value}\r\n`;
  }
  const body = options.body;
  if (body !== null) head += `content-length: ${body.byteLength}\r\n`;
  else if (options.method === "POST") head += "content-length: 0\r\n";
  return `${head}\r\n`;
}
