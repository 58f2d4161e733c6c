// Patches @nats-io/nats-core internals (MsgHdrsImpl, MsgImpl): see UPSTREAM.md.
import { canonicalMIMEHeaderKey, Match, MsgHdrsImpl } from "@nats-io/nats-core";
import type { Msg, MsgHdrs } from "@nats-io/nats-core";

/*
 * NATS headers with constant-time exact-name access. The client's own implementation lists
 * and filters every key on each get, set and has (a set does it twice), so building the dozen
 * routing headers of one `route.request`, or reading them back, is quadratic and allocates an
 * array per call. Exact-name access is a Map lookup: the same answer, since an exact match is
 * the client's default and it stores each name as given. Other match modes, encoding and
 * everything else are the client's.
 */

/** Names already checked once: a valid header name stays valid. */
const validNames = new Set<string>();
const INVALID_VALUE = /[\r\n]/;

function checkName(name: string): void {
  if (validNames.has(name)) return;
  canonicalMIMEHeaderKey(name); // throws on characters a header name may not hold
  if (validNames.size < 1_000) validNames.add(name);
}

function checkValue(value: string): string {
  // The client's own check, with its message.
  return INVALID_VALUE.test(value) ? MsgHdrsImpl.validHeaderValue(value) : value.trim();
}

class FastHeaders extends MsgHdrsImpl {
  // The client's declaration narrows get's match to "exact"; its code takes any Match.
  override get(k: string, match: Match = Match.Exact): string {
    if (match !== Match.Exact) return (super.get as (k: string, m: Match) => string)(k, match);
    return this.headers.get(k)?.[0] ?? "";
  }

  override has(k: string, match: Match = Match.Exact): boolean {
    if (match !== Match.Exact) return super.has(k, match);
    return this.headers.has(k);
  }

  override set(k: string, v: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.set(k, v, match);
    checkName(k);
    this.headers.set(k, [checkValue(v)]);
  }

  override append(k: string, v: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.append(k, v, match);
    checkName(k);
    const value = checkValue(v);
    const values = this.headers.get(k);
    if (values) values.push(value);
    else this.headers.set(k, [value]);
  }

  override delete(k: string, match: Match = Match.Exact): void {
    if (match !== Match.Exact) return super.delete(k, match);
    this.headers.delete(k);
  }
}

/**
 * Whether `h` is this module's headers rather than the client's: false after
 * {@link decodeHeadersOf} means the client changed how it stores a received message, and the
 * fast path is lost. The client version is pinned exactly (package.json) for that reason, and
 * `fast-headers.test.ts` checks this on a message from a real server, so an upgrade that
 * loses it fails a test instead of slowing down unnoticed.
 */
export function isFastHeaders(h: MsgHdrs | undefined): boolean {
  return h instanceof FastHeaders;
}

/** Empty NATS headers for a message to publish (see above). */
export function createHeaders(): MsgHdrs {
  return new FastHeaders();
}

/**
 * One header of a received message by its exact name, "" when absent: a Map lookup on the
 * client's decoded headers instead of its list-and-filter `get`.
 */
export function headerOf(h: MsgHdrs | undefined, name: string): string {
  if (h === undefined) return "";
  if (h instanceof MsgHdrsImpl) return h.headers.get(name)?.[0] ?? "";
  return h.get(name);
}

const decoder = new TextDecoder();
/** The first line of a header block without a status (RFC-style "NATS/1.0" version line). */
const VERSION_LINE = "NATS/1.0";

/**
 * Decodes a received header block into {@link FastHeaders}: the client's `MsgHdrsImpl.decode`
 * rules (lines split on CRLF, name before the first colon, value trimmed, the same name and
 * value checks, which throw as the client's do), without its per-line list-and-filter
 * `append`, which made decoding a dozen routing headers quadratic and allocation-heavy. A
 * block with a status line (e.g. the server's 503 "no responders") is left to the client.
 */
export function decodeHeaderBlock(block: Uint8Array): MsgHdrs {
  const text = decoder.decode(block);
  const firstEnd = text.indexOf("\r\n");
  if ((firstEnd < 0 ? text : text.slice(0, firstEnd)) !== VERSION_LINE) {
    return MsgHdrsImpl.decode(block);
  }
  const h = new FastHeaders();
  let at = firstEnd + 2;
  while (at < text.length) {
    let end = text.indexOf("\r\n", at);
    if (end < 0) end = text.length;
    const colon = text.indexOf(":", at);
    if (colon > -1 && colon < end) h.append(text.slice(at, colon), text.slice(colon + 1, end));
    at = end + 2;
  }
  return h;
}

/** The parts of the client's received message (`MsgImpl`) that hold its undecoded headers. */
interface ReceivedMessage {
  _msg?: { hdr?: unknown };
  _rdata?: unknown;
  _headers?: MsgHdrs;
}

/**
 * Decodes a received message's headers with {@link decodeHeaderBlock} before anything reads
 * `msg.headers`, which then returns them: call it first thing in a hot subscription's
 * callback. A message of another shape (a client version that stores them differently) is
 * left alone and decodes the client's way on first read.
 */
export function decodeHeadersOf(msg: Msg): void {
  const m = msg as unknown as ReceivedMessage;
  const length = m._msg?.hdr;
  if (m._headers !== undefined || typeof length !== "number" || length < 0) return;
  if (!(m._rdata instanceof Uint8Array)) return;
  m._headers = decodeHeaderBlock(m._rdata.subarray(0, length));
}
