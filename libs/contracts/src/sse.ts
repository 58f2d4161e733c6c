/**
 * Server-sent events cut at their blank lines: the one cutter of the dispatcher (which relays
 * runs of whole events, so a client never receives half an event), the TD proxy (which seals
 * each event as one chunk) and the TypeScript SDK (which parses them). It works on bytes, and
 * an event inside one read is a view of that read, not a copy: only an event split across
 * reads is joined. Nothing here parses JSON or reads fields.
 *
 * Plain code with no imports, so the SDK can bundle it (`@zml/contracts/sse`).
 */

const LF_LF = Buffer.from("\n\n");
/** The end of `\r\n\r\n` (or `\n\r\n`): a CRLF blank line after a line end. */
const LF_CRLF = Buffer.from("\n\r\n");
const LF = 0x0a;
const CR = 0x0d;

/**
 * An event held back longer than this is passed on unfinished, so memory stays bounded. Real
 * events are a few hundred bytes; only a Responses API `response.completed`, which repeats
 * the whole answer, gets large.
 */
export const MAX_HELD_EVENT_BYTES = 256 * 1024;

const DONE = Buffer.from("data: [DONE]");

/** Whether an event is OpenAI's terminal `data: [DONE]` (with its blank line, LF or CRLF). */
export function isDoneEvent(event: Buffer | undefined): boolean {
  return (
    event !== undefined &&
    event.length <= DONE.length + 4 &&
    event.subarray(0, DONE.length).equals(DONE)
  );
}

/**
 * How many events a run of whole events holds: every blank line (`\n\n` or `\n\r\n`) ends
 * one. A count without a view per event, for a relay that numbers what it passed on.
 */
export function countEvents(run: Uint8Array): number {
  let count = 0;
  for (let i = 1; i < run.length; i++) {
    if (run[i] !== LF) continue;
    const prev = run[i - 1];
    if (prev === LF || (prev === CR && i >= 2 && run[i - 2] === LF)) count++;
  }
  return count;
}

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/**
 * Index just past the last blank line that ends at or before `limit`, or -1. Blank lines end
 * in LF or CRLF (every serving framework's); CR-only line ends are not recognised here, so an
 * event whose lines end in CR alone is cut at the next LF blank line (a reader of the fields
 * still splits its lines at CR).
 */
export function lastBoundaryEnd(buf: Uint8Array, limit = buf.length): number {
  return boundaryEnd(asBuffer(buf), limit);
}

/** {@link lastBoundaryEnd} of a Buffer: the cutter's per-read call, with no check of its type. */
function boundaryEnd(b: Buffer, limit: number): number {
  // The usual read ends right after a blank line: no search needed.
  if (
    limit >= 2 &&
    b[limit - 1] === LF &&
    (b[limit - 2] === LF || (b[limit - 2] === CR && b[limit - 3] === LF))
  ) {
    return limit;
  }
  const lf = limit >= 2 ? b.lastIndexOf(LF_LF, limit - 2) : -1;
  const crlf = limit >= 3 ? b.lastIndexOf(LF_CRLF, limit - 3) : -1;
  return Math.max(lf === -1 ? -1 : lf + 2, crlf === -1 ? -1 : crlf + 3);
}

/** Where the last event of the whole events in `run[0, end)` starts. */
function lastEventStart(run: Buffer, end: number): number {
  return Math.max(0, boundaryEnd(run, end - 2));
}

export interface SseEventCutterOptions {
  /**
   * Bytes of one unfinished event held before they are passed on unfinished; default
   * {@link MAX_HELD_EVENT_BYTES}. `Infinity` holds an event however long (a reader that must
   * see whole events and bounds the stream another way).
   */
  maxHeldBytes?: number;
}

/**
 * Cuts a byte stream into runs of whole SSE events. `push` returns the bytes that end on an
 * event boundary (or null) and keeps the rest until its blank line arrives; the read that is
 * whole events only (the common one) is returned as it came. What is held when the stream
 * ends is the caller's to take (`takePending`), never sent by the cutter itself.
 */
export class SseEventCutter {
  private readonly maxHeldBytes: number;
  private held: Buffer[] = [];
  private heldBytes = 0;
  /**
   * The last two runs of whole events sent: the last two events are in them. They are cut
   * out only when asked for (at the stream's end), so a read costs no allocation for them.
   */
  private lastRun: Buffer | undefined;
  private runBefore: Buffer | undefined;

  constructor(options: SseEventCutterOptions = {}) {
    this.maxHeldBytes = options.maxHeldBytes ?? MAX_HELD_EVENT_BYTES;
  }

  /** The whole events these bytes complete, as one run; a Buffer (the SDK wraps its reads). */
  push(chunk: Buffer): Buffer | null {
    let end = boundaryEnd(chunk, chunk.length);
    if (end === -1 && this.heldBytes > 0) end = this.straddlingEnd(chunk);
    if (end === -1) {
      this.hold(chunk);
      if (this.heldBytes <= this.maxHeldBytes) return null;
      // An "event" this long is no event: pass it on rather than hold it without bound.
      return this.takePending() ?? null;
    }
    const out =
      this.heldBytes === 0
        ? end === chunk.length
          ? chunk // the common read: whole events only, passed on as it came
          : chunk.subarray(0, end)
        : Buffer.concat([...this.held, chunk.subarray(0, end)], this.heldBytes + end);
    if (this.heldBytes !== 0) {
      this.held = [];
      this.heldBytes = 0;
    }
    if (end < chunk.length) this.hold(chunk.subarray(end));
    this.runBefore = this.lastRun;
    this.lastRun = out;
    return out;
  }

  /** Takes the bytes of an unfinished event held back (at the end of a stream). */
  takePending(): Buffer | undefined {
    const rest = this.peekPending();
    this.held = [];
    this.heldBytes = 0;
    return rest;
  }

  /** The bytes of an unfinished event held back, left held. */
  peekPending(): Buffer | undefined {
    return this.heldBytes === 0 ? undefined : Buffer.concat(this.held, this.heldBytes);
  }

  /** Bytes of an unfinished event held back. */
  get pending(): number {
    return this.heldBytes;
  }

  /** The last whole event sent, if any. */
  lastEvent(): Buffer | undefined {
    return this.lastEvents()[0];
  }

  /** The last two whole events sent, last first (either may be missing). */
  lastEvents(): [Buffer | undefined, Buffer | undefined] {
    const run = this.lastRun;
    if (run === undefined) return [undefined, undefined];
    const start = lastEventStart(run, run.length);
    const last = run.subarray(start);
    if (start > 0) return [last, run.subarray(lastEventStart(run, start), start)];
    const before = this.runBefore;
    return [last, before?.subarray(lastEventStart(before, before.length))];
  }

  private hold(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.held.push(bytes);
    this.heldBytes += bytes.length;
  }

  /** A blank line split across the held bytes and the new chunk (at most 3 + 3 bytes). */
  private straddlingEnd(chunk: Buffer): number {
    const tailParts: Buffer[] = [];
    let tailBytes = 0;
    for (let i = this.held.length - 1; i >= 0 && tailBytes < 3; i--) {
      tailParts.unshift(this.held[i]!);
      tailBytes += this.held[i]!.length;
    }
    const heldTail = Buffer.concat(tailParts).subarray(-3);
    const seam = Buffer.concat([heldTail, chunk.subarray(0, 3)]);
    const end = boundaryEnd(seam, seam.length);
    return end > heldTail.length ? end - heldTail.length : -1;
  }
}

/**
 * The events of a run of whole events (what {@link SseEventCutter.push} returns), each with
 * its closing blank line, as views of the run. Read from the front, an event ends at the first
 * blank line after a line end; an empty line after that (a stray blank line, which dispatches
 * nothing) stays with the event before it, so the last event ends where the run does.
 */
export function splitEvents(run: Uint8Array): Buffer[] {
  const b = asBuffer(run);
  const events: Buffer[] = [];
  let start = 0;
  let lastStart = 0;
  for (let lf = b.indexOf(LF); lf !== -1; lf = b.indexOf(LF, lf + 1)) {
    let end = -1;
    if (b[lf + 1] === LF) end = lf + 2;
    else if (b[lf + 1] === CR && b[lf + 2] === LF) end = lf + 3;
    if (end === -1) continue;
    events.push(b.subarray(start, end));
    lastStart = start;
    start = end;
    lf = end - 1;
  }
  if (start < b.length) {
    // Bytes past the last blank line found from the front: they close the last event.
    events.pop();
    events.push(b.subarray(lastStart));
  }
  return events;
}
