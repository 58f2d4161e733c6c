import { REPLY_BATCH } from "@zml/contracts";

/**
 * The payload of a frame batch (`route.reply.batch.v1`, see `REPLY_BATCH` in @zml/contracts):
 * a table of contents first, then every frame's meta and data. The table comes first so that
 * a batch whose bodies do not add up still names every stream it held, and each of them can
 * be ended with an error instead of waiting for a timeout.
 */

export type BatchKind = (typeof REPLY_BATCH.kinds)[number];

/** One frame on its way into a batch. Chunks of one stream may be merged while it is open. */
export interface OutgoingFrame {
  /** The last token of the frame's reply inbox. */
  id: string;
  kind: BatchKind;
  /** The frame's sequence number; ignored for `accept`. */
  seq: number;
  /** The frame's headers besides kind and sequence, as name and value. */
  headers: ReadonlyArray<readonly [string, string]>;
  /** The same headers encoded for a batch (see {@link encodeMeta}). */
  meta: Uint8Array;
  /** The body, in pieces (merged chunks), written one after another. */
  pieces: Uint8Array[];
  /** Sum of the pieces' lengths. */
  bytes: number;
}

/** A frame read out of a batch; `data` is a view into the batch's payload. */
export interface IncomingFrame {
  id: string;
  kind: BatchKind;
  seq: number;
  /** The frame's headers by exact name. */
  meta: ReadonlyMap<string, string>;
  data: Uint8Array;
}

export type DecodedBatch =
  | { ok: true; frames: IncomingFrame[] }
  /**
   * `ids`: the streams the batch named before it went wrong (every one of them when its table
   * of contents was whole); `complete` says whether the table was whole.
   */
  | { ok: false; error: string; ids: string[]; complete: boolean };

const ACCEPT_SEQ = 0xffffffff;
/** Bytes of one table entry besides its id. */
const ENTRY_FIXED = 1 + 1 + 4 + 2 + 4;
const KIND_CODES = new Map<string, number>(REPLY_BATCH.kinds.map((k, i) => [k, i]));
const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");
const utf8 = new TextDecoder();
const EMPTY = new Uint8Array(0);
const NO_META: ReadonlyMap<string, string> = new Map();

/** Bytes a frame adds to a batch: its table entry, meta and data. */
export function batchedSize(frame: OutgoingFrame): number {
  return ENTRY_FIXED + frame.id.length + frame.meta.byteLength + frame.bytes;
}

/** Bytes of an empty batch: version and count. */
export const BATCH_OVERHEAD = 3;

/** Header lines of a frame's meta (`Name: value\r\n` each); empty for none. */
export function encodeMeta(pairs: ReadonlyArray<readonly [string, string]>): Uint8Array {
  if (pairs.length === 0) return EMPTY;
  let text = "";
  for (const [name, value] of pairs) text += `${name}: ${value}\r\n`;
  return encoder.encode(text);
}

/** One allocation: the payload is written in place, every piece copied once. */
export function encodeFrameBatch(frames: readonly OutgoingFrame[]): Uint8Array {
  if (frames.length === 0 || frames.length > 0xffff) {
    throw new RangeError(`a frame batch holds 1 to 65535 frames, not ${frames.length}`);
  }
  // Indexed loops here and below: this runs for every frame of every turn, and an array
  // iterator that V8 does not optimise away allocates a result per element.
  let size = BATCH_OVERHEAD;
  for (let i = 0; i < frames.length; i++) size += batchedSize(frames[i]!);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  out[0] = REPLY_BATCH.version;
  view.setUint16(1, frames.length);
  let at = BATCH_OVERHEAD;
  for (let n = 0; n < frames.length; n++) {
    const f = frames[n]!;
    if (f.id.length === 0 || f.id.length > 255) throw new RangeError(`bad frame id ${f.id}`);
    if (f.meta.byteLength > 0xffff) throw new RangeError("frame meta over 64 KiB");
    out[at++] = f.id.length;
    for (let i = 0; i < f.id.length; i++) out[at++] = f.id.charCodeAt(i) & 0x7f;
    out[at++] = KIND_CODES.get(f.kind)!;
    view.setUint32(at, f.kind === "accept" ? ACCEPT_SEQ : f.seq);
    view.setUint16(at + 4, f.meta.byteLength);
    view.setUint32(at + 6, f.bytes);
    at += 10;
  }
  for (let n = 0; n < frames.length; n++) {
    const f = frames[n]!;
    if (f.meta.byteLength > 0) {
      out.set(f.meta, at);
      at += f.meta.byteLength;
    }
    const pieces = f.pieces;
    for (let p = 0; p < pieces.length; p++) {
      out.set(pieces[p]!, at);
      at += pieces[p]!.byteLength;
    }
  }
  return out;
}

/** A frame whose table entry is read; `data` is set once the bodies are checked. */
interface ReadingFrame {
  id: string;
  kind: BatchKind;
  seq: number;
  meta: ReadonlyMap<string, string>;
  data: Uint8Array;
  metaBytes: number;
  dataBytes: number;
}

/**
 * Reads a batch's payload. Never throws: a batch that breaks the format says what it named.
 * Each frame is one object, filled in two passes (table, then bodies); a frame without meta
 * (every chunk) costs no view or map for it.
 */
export function decodeFrameBatch(payload: Uint8Array): DecodedBatch {
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const frames: ReadingFrame[] = [];
  const broken = (error: string, complete: boolean): DecodedBatch => ({
    ok: false,
    error,
    ids: frames.map((f) => f.id),
    complete,
  });
  if (payload.byteLength < BATCH_OVERHEAD)
    return broken("frame batch shorter than its header", false);
  if (payload[0] !== REPLY_BATCH.version) {
    return broken(`frame batch of version ${payload[0]}, expected ${REPLY_BATCH.version}`, false);
  }
  const count = view.getUint16(1);
  if (count === 0) return broken("frame batch without frames", true);
  let at = BATCH_OVERHEAD;
  for (let i = 0; i < count; i++) {
    const idLength = payload[at];
    if (
      idLength === undefined ||
      idLength === 0 ||
      at + ENTRY_FIXED + idLength > payload.byteLength
    ) {
      return broken("frame batch's table of contents is cut short", false);
    }
    const id = asciiOf(payload, at + 1, at + 1 + idLength);
    at += 1 + idLength;
    const code = payload[at]!;
    const kind = REPLY_BATCH.kinds[code];
    const seq = view.getUint32(at + 1);
    frames.push({
      id,
      kind: kind ?? "error",
      seq: kind === "accept" ? -1 : seq,
      meta: NO_META,
      data: EMPTY,
      metaBytes: view.getUint16(at + 5),
      dataBytes: view.getUint32(at + 7),
    });
    at += ENTRY_FIXED - 1;
    if (kind === undefined) return broken(`frame ${id} of unknown kind ${code}`, false);
  }
  let bodies = 0;
  for (let n = 0; n < frames.length; n++) bodies += frames[n]!.metaBytes + frames[n]!.dataBytes;
  if (at + bodies !== payload.byteLength) {
    return broken(
      `frame batch holds ${payload.byteLength - at} body bytes, its table says ${bodies}`,
      true,
    );
  }
  for (let n = 0; n < frames.length; n++) {
    const f = frames[n]!;
    if (f.metaBytes > 0) {
      const meta = decodeMeta(payload.subarray(at, at + f.metaBytes));
      if (meta === undefined) return broken(`frame ${f.id} has malformed meta`, true);
      f.meta = meta;
      at += f.metaBytes;
    }
    if (f.dataBytes > 0) {
      f.data = payload.subarray(at, at + f.dataBytes);
      at += f.dataBytes;
    }
  }
  return { ok: true, frames };
}

/**
 * A short ASCII token (a request id, a base-36 counter of a few characters) as one string
 * made at once: adding characters one by one would make a string per character.
 */
function asciiOf(b: Uint8Array, at: number, end: number): string {
  switch (end - at) {
    case 1:
      return String.fromCharCode(b[at]!);
    case 2:
      return String.fromCharCode(b[at]!, b[at + 1]!);
    case 3:
      return String.fromCharCode(b[at]!, b[at + 1]!, b[at + 2]!);
    case 4:
      return String.fromCharCode(b[at]!, b[at + 1]!, b[at + 2]!, b[at + 3]!);
    case 5:
      return String.fromCharCode(b[at]!, b[at + 1]!, b[at + 2]!, b[at + 3]!, b[at + 4]!);
    case 6:
      return String.fromCharCode(
        b[at]!,
        b[at + 1]!,
        b[at + 2]!,
        b[at + 3]!,
        b[at + 4]!,
        b[at + 5]!,
      );
    default:
      return latin1.decode(b.subarray(at, end));
  }
}

function decodeMeta(bytes: Uint8Array): Map<string, string> | undefined {
  const text = utf8.decode(bytes);
  const meta = new Map<string, string>();
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf("\r\n", at);
    const colon = text.indexOf(":", at);
    if (end === -1 || colon === -1 || colon > end) return undefined;
    meta.set(text.slice(at, colon), text.slice(colon + 1, end).trim());
    at = end + 2;
  }
  return meta;
}
