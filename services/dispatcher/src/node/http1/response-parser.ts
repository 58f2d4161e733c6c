import type { IncomingHttpHeaders } from "node:http";

/**
 * Reads HTTP/1.1 answers from a node connection's bytes: the status line and headers, then
 * the body as the answer frames it (Content-Length, chunked coding, or the connection's end).
 * Pure: bytes in, {@link ResponseSink} calls out; the connection around it does the I/O.
 *
 * Strict where a lenient reader would let a hostile node smuggle or confuse: CRLF line ends
 * only, no folded header lines, no control characters, no Content-Length beside
 * Transfer-Encoding or two lengths that differ, a bounded head, bounded chunk-size lines.
 * A violation throws {@link MalformedAnswerError}; the connection is then dropped.
 */
export interface ResponseSink {
  /** The final head (1xx heads are read and skipped). */
  onHead(head: ResponseHead): void;
  /**
   * A piece of the body: `data[start, end)` of the bytes passed to `execute`, which may be
   * reused once `execute` returns (copy what is kept).
   */
  onBody(data: Buffer, start: number, end: number): void;
  /** The answer is complete. */
  onEnd(): void;
}

export interface ResponseHead {
  statusCode: number;
  statusMessage: string;
  headers: IncomingHttpHeaders;
  /** Whether the connection may carry another request once this answer ends. */
  keepAlive: boolean;
  /** How long the node keeps an idle connection (`Keep-Alive: timeout=N`), in ms. */
  keepAliveHintMs: number | undefined;
}

export class MalformedAnswerError extends Error {
  readonly code = "ZML_NODE_MALFORMED_ANSWER";
  constructor(message: string) {
    super(`malformed node answer: ${message}`);
    this.name = "MalformedAnswerError";
  }
}

/** Most bytes of a head (status line and headers), as undici's default. */
export const MAX_HEAD_BYTES = 16 * 1024;
/** Most bytes of one chunk-size line, extensions included, or of the trailer section. */
const MAX_LINE_BYTES = 4 * 1024;

const CR = 0x0d;
const LF = 0x0a;
/** An HTTP token (RFC 9110 §5.6.2): a header name. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: (.*))?$/;
const HEX_SIZE = /^([0-9A-Fa-f]{1,12})[ \t]*(?:;.*)?$/;

/** Where the reader is in an answer. */
const State = {
  Head: 0,
  LengthBody: 1,
  ChunkSize: 2,
  ChunkData: 3,
  /** The CRLF after a chunk's data. */
  ChunkDataEnd: 4,
  Trailers: 5,
  UntilClose: 6,
  Done: 7,
} as const;
type State = (typeof State)[keyof typeof State];

export class ResponseParser {
  private state: State = State.Head;
  /** Bytes of an unfinished head, chunk-size line or trailer section. */
  private pending: Buffer | null = null;
  /** Body bytes still due: of the whole body (LengthBody) or of this chunk (ChunkData). */
  private remaining = 0;
  /** Of a chunk's closing CRLF, how many bytes are read. */
  private crlfSeen = 0;
  private readonly sink: ResponseSink;

  constructor(sink: ResponseSink) {
    this.sink = sink;
  }

  /** Starts reading the next answer on this connection. */
  reset(): void {
    this.state = State.Head;
    this.pending = null;
  }

  /**
   * Reads `data[0, end)`; returns how many of those bytes are left over after the answer
   * ended (bytes a node should not have sent, as nothing was pipelined). Stops early when a
   * sink call finished the answer, or when `stillWanted()` turns false (the call was cut).
   * Keeps no view of `data`: the caller may reuse it.
   */
  execute(data: Buffer, end: number, stillWanted: () => boolean): number {
    let at = 0;
    while (at < end) {
      if (this.state === State.Done) return end - at;
      if (!stillWanted()) return 0;
      switch (this.state) {
        case State.Head:
          at = this.readHead(data, at, end);
          break;
        case State.LengthBody:
          at = this.readBody(data, at, end);
          if (this.remaining === 0) this.end();
          break;
        case State.ChunkSize:
          at = this.readChunkSize(data, at, end);
          break;
        case State.ChunkData:
          at = this.readBody(data, at, end);
          if (this.remaining === 0) {
            this.state = State.ChunkDataEnd;
            this.crlfSeen = 0;
          }
          break;
        case State.ChunkDataEnd: {
          const want = this.crlfSeen === 0 ? CR : LF;
          if (data[at] !== want) throw new MalformedAnswerError("a chunk does not end in CRLF");
          at++;
          if (++this.crlfSeen === 2) this.state = State.ChunkSize;
          break;
        }
        case State.Trailers:
          at = this.readTrailers(data, at, end);
          break;
        case State.UntilClose:
          this.sink.onBody(data, at, end);
          at = end;
          break;
      }
    }
    return 0;
  }

  /** The connection ended: completes a body that runs until the end; false if it ended none. */
  finish(): boolean {
    if (this.state !== State.UntilClose) return false;
    this.end();
    return true;
  }

  /** Hands on what `data` holds of the `remaining` body bytes from `at`; where reading goes on. */
  private readBody(data: Buffer, at: number, end: number): number {
    const n = Math.min(this.remaining, end - at);
    this.remaining -= n;
    this.sink.onBody(data, at, at + n);
    return at + n;
  }

  private end(): void {
    this.state = State.Done;
    this.pending = null;
    this.sink.onEnd();
  }

  /** Bytes `[at, end)` joined to what is pending, and the offset where the new ones start. */
  private joined(data: Buffer, at: number, end: number): { bytes: Buffer; from: number } {
    if (this.pending === null) return { bytes: data.subarray(at, end), from: 0 };
    const from = this.pending.length;
    return { bytes: Buffer.concat([this.pending, data.subarray(at, end)]), from };
  }

  private readHead(data: Buffer, at: number, end: number): number {
    const { bytes, from } = this.joined(data, at, end);
    // The blank line may straddle the join: look from three bytes before it.
    const blank = bytes.indexOf("\r\n\r\n", Math.max(0, from - 3), "latin1");
    if (blank === -1) {
      if (bytes.length > MAX_HEAD_BYTES) throw new MalformedAnswerError("head too large");
      this.pending = Buffer.from(bytes);
      return end;
    }
    if (blank > MAX_HEAD_BYTES) throw new MalformedAnswerError("head too large");
    this.pending = null;
    const consumed = blank + 4 - from;
    this.onHead(bytes.toString("latin1", 0, blank));
    return at + consumed;
  }

  private onHead(text: string): void {
    const lines = text.split("\r\n");
    const status = STATUS_LINE.exec(lines[0]!);
    if (status === null || hasControlChar(lines[0]!)) {
      throw new MalformedAnswerError("bad status line");
    }
    const http10 = status[1] === "0";
    const statusCode = Number(status[2]);
    const headers: IncomingHttpHeaders = {};
    for (let i = 1; i < lines.length; i++) addHeader(headers, lines[i]!);
    if (statusCode < 200) {
      if (statusCode === 101) throw new MalformedAnswerError("a protocol switch was not asked for");
      return; // 1xx: informational; the answer's head is still to come
    }
    const connection = tokensOf(headers.connection);
    const keepAlive = !http10 && !connection.includes("close");
    const hint = /(?:^|[,;\s])timeout=(\d+)/i.exec(first(headers["keep-alive"]) ?? "");
    this.sink.onHead({
      statusCode,
      statusMessage: status[3] ?? "",
      headers,
      keepAlive,
      keepAliveHintMs: hint ? Number(hint[1]) * 1000 : undefined,
    });
    this.frameBody(statusCode, headers);
  }

  private frameBody(statusCode: number, headers: IncomingHttpHeaders): void {
    const te = headers["transfer-encoding"];
    const cl = headers["content-length"];
    if (te !== undefined && cl !== undefined) {
      throw new MalformedAnswerError("both Content-Length and Transfer-Encoding");
    }
    if (statusCode === 204 || statusCode === 304) {
      this.end();
      return;
    }
    if (te !== undefined) {
      const codings = tokensOf(te);
      this.state = codings[codings.length - 1] === "chunked" ? State.ChunkSize : State.UntilClose;
      return;
    }
    if (cl !== undefined) {
      this.remaining = contentLength(cl);
      if (this.remaining === 0) this.end();
      else this.state = State.LengthBody;
      return;
    }
    this.state = State.UntilClose;
  }

  private readChunkSize(data: Buffer, at: number, end: number): number {
    if (this.pending === null) {
      // The common case, a token's chunk: the whole line in this read, no extension.
      let size = 0;
      let i = at;
      for (; i < end && i - at < 12; i++) {
        const digit = hexValue(data[i]!);
        if (digit < 0) break;
        size = size * 16 + digit;
      }
      if (i > at && i + 1 < end && data[i] === CR && data[i + 1] === LF) {
        this.startChunk(size);
        return i + 2;
      }
    }
    const found = data.indexOf(LF, at);
    const lf = found < end ? found : -1;
    if (lf === -1) {
      const size = (this.pending?.length ?? 0) + end - at;
      if (size > MAX_LINE_BYTES) throw new MalformedAnswerError("chunk-size line too long");
      this.pending = Buffer.from(this.joined(data, at, end).bytes);
      return end;
    }
    const { bytes } = this.joined(data, at, lf + 1);
    const lineEnd = (this.pending?.length ?? 0) + lf - at;
    this.pending = null;
    if (lineEnd > MAX_LINE_BYTES) throw new MalformedAnswerError("chunk-size line too long");
    if (lineEnd === 0 || bytes[lineEnd - 1] !== CR) {
      throw new MalformedAnswerError("a chunk-size line does not end in CRLF");
    }
    const line = bytes.toString("latin1", 0, lineEnd - 1);
    const size = HEX_SIZE.exec(line);
    if (size === null || hasControlChar(line)) throw new MalformedAnswerError("bad chunk size");
    this.startChunk(Number.parseInt(size[1]!, 16));
    return lf + 1;
  }

  private startChunk(size: number): void {
    this.remaining = size;
    this.state = size === 0 ? State.Trailers : State.ChunkData;
  }

  /** After the last chunk: trailer lines (read, bounded and dropped) up to a blank line. */
  private readTrailers(data: Buffer, at: number, end: number): number {
    const { bytes, from } = this.joined(data, at, end);
    const blank =
      bytes[0] === CR && bytes[1] === LF ? 0 : bytes.indexOf("\r\n\r\n", Math.max(0, from - 3));
    if (blank === -1) {
      if (bytes.length > MAX_LINE_BYTES) throw new MalformedAnswerError("trailers too large");
      this.pending = Buffer.from(bytes);
      return end;
    }
    const consumed = (blank === 0 ? 2 : blank + 4) - from;
    // Checked as headers are, then dropped: nothing downstream reads a node's trailers.
    if (blank > 0) {
      const trailers: IncomingHttpHeaders = {};
      for (const line of bytes.toString("latin1", 0, blank).split("\r\n")) {
        addHeader(trailers, line);
      }
    }
    this.end();
    return at + consumed;
  }
}

function addHeader(headers: IncomingHttpHeaders, line: string): void {
  const colon = line.indexOf(":");
  if (colon <= 0) throw new MalformedAnswerError("bad header line");
  const name = line.slice(0, colon);
  if (!TOKEN.test(name)) throw new MalformedAnswerError("bad header name");
  const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, "");
  if (hasControlChar(value)) throw new MalformedAnswerError(`bad value in header ${name}`);
  const key = name.toLowerCase();
  const had = headers[key];
  if (had === undefined) headers[key] = value;
  else if (Array.isArray(had)) had.push(value);
  else headers[key] = [had, value];
}

/**
 * Whether `s` holds a control character other than HTAB (not allowed in a field value, RFC
 * 9110 §5.5; obs-text, 0x80–0xFF, is).
 */
export function hasControlChar(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true;
  }
  return false;
}

/** A hex digit's value, or -1. */
function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** A comma-separated header's tokens, lower-cased; repeated headers joined. */
function tokensOf(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const joined = Array.isArray(value) ? value.join(",") : value;
  return joined
    .split(",")
    .map((t) => t.trim().toLowerCase())
    .filter((t) => t !== "");
}

/** The one length a Content-Length states; repeats must agree (RFC 9110 §8.6). */
function contentLength(value: string | string[]): number {
  const values = new Set(tokensOf(value));
  const [only] = values;
  if (values.size !== 1 || only === undefined || !/^\d{1,15}$/.test(only)) {
    throw new MalformedAnswerError("bad Content-Length");
  }
  return Number(only);
}
