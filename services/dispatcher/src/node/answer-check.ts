// What a node's successful (2xx) answer must be before the gateway relays it as its own: JSON
// where JSON is due, server-sent events where a stream is due. Judged before any byte goes
// to the client, so a node that fails the check costs an attempt, not the answer.
//
// Cheap on purpose, because every answer passes here: the media type (a string compare), and
// for JSON the framing (the first and last bytes that are not white space: 10–25 ns whatever
// the size) plus a real parse only for a body of at most PARSED_JSON_MAX_BYTES, which nearly
// every chat answer is. Measured (`npm run bench -w @zml/dispatcher`, 2 loaded cores): 2–3 µs
// for a 0.5–1.3 KB completion, 8 µs at 8 KB, 11 µs at 15 KB, against the dispatcher's
// 200–450 µs of CPU per request (docs/performance.md). A stream is judged by its first
// event only (`firstEventOf` in sse-events.ts), when its head is held for it anyway.
//
// A tier-4 sealed answer is judged by its envelope only, which is all the gateway can see:
// the sealed media type is the JSON it is due, the envelope is checked as JSON like any
// other body, and the ciphertext it carries is never opened or judged.

import { SEALED_RESPONSE_MEDIA_TYPE } from "@zml/contracts";

/** What a 2xx answer is to be relayed as, or why it is refused. */
export type DueAnswer =
  /** A JSON body (or a sealed envelope), to check with {@link isJsonBody}. */
  { kind: "json"; contentType: string } | { kind: "sse" } | { kind: "refused"; reason: string };

/**
 * Bodies up to this size are parsed whole to be judged; larger ones (long answers, large
 * embeddings) only have their framing checked: their generation took seconds of GPU time,
 * but a parse would hold the event loop for tens of microseconds to milliseconds.
 */
export const PARSED_JSON_MAX_BYTES = 16 * 1024;

/**
 * What a 2xx answer with this content type is due to be for a call: a clear call wants
 * `text/event-stream` for a stream and `application/json` (or no type, judged by the body)
 * otherwise; a sealed call wants the sealed media type, or for a stream `text/event-stream`
 * (the TD proxy seals a non-stream answer of its server as an envelope even then).
 */
export function dueAnswer(
  contentType: string | undefined,
  call: { stream: boolean; sealed: boolean },
): DueAnswer {
  const type = mediaTypeOf(contentType);
  if (call.stream && type === "text/event-stream") return { kind: "sse" };
  const json = call.sealed ? SEALED_RESPONSE_MEDIA_TYPE : "application/json";
  if (type === json && (call.sealed || !call.stream)) {
    return { kind: "json", contentType: contentType! };
  }
  if (type === undefined && !call.sealed && !call.stream) {
    return { kind: "json", contentType: "application/json" };
  }
  const due = call.stream ? (call.sealed ? `SSE or ${json}` : "SSE") : json;
  return { kind: "refused", reason: `answered ${describeType(type)} where ${due} is due` };
}

/**
 * Whether a body is JSON: an object or array by its framing, and when small, by a parse.
 * A body that ends early, or a page of HTML or text, fails even the framing.
 */
export function isJsonBody(body: Uint8Array): boolean {
  if (!hasJsonFraming(body)) return false;
  if (body.byteLength > PARSED_JSON_MAX_BYTES) return true;
  try {
    JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8"));
    return true;
  } catch {
    return false;
  }
}

/** Whether the first and last bytes that are not JSON white space are `{…}` or `[…]`. */
export function hasJsonFraming(body: Uint8Array): boolean {
  let first = 0;
  let last = body.byteLength - 1;
  while (first <= last && isJsonSpace(body[first]!)) first++;
  while (last > first && isJsonSpace(body[last]!)) last--;
  if (last <= first) return false;
  return opensJson(body[first]!) && body[last] === closerOf(body[first]!);
}

/**
 * The framing of a JSON body that is relayed as it arrives (too large to hold): its first
 * byte is judged before anything is relayed, its last once the body has ended.
 */
export class JsonFramingTracker {
  private opener = -1;
  private lastByte = -1;

  /** Takes the next piece of the body. */
  push(chunk: Uint8Array): void {
    let i = 0;
    if (this.opener === -1) {
      while (i < chunk.byteLength && isJsonSpace(chunk[i]!)) i++;
      if (i < chunk.byteLength) this.opener = chunk[i]!;
    }
    for (let j = chunk.byteLength - 1; j >= i; j--) {
      if (!isJsonSpace(chunk[j]!)) {
        this.lastByte = chunk[j]!;
        return;
      }
    }
  }

  /** Whether the body so far starts as JSON does (false before any byte that is not space). */
  opensWell(): boolean {
    return opensJson(this.opener);
  }

  /** Whether the whole body, once ended, is framed as JSON. */
  closesWell(): boolean {
    return this.opensWell() && this.lastByte === closerOf(this.opener);
  }
}

/** The media type of a `content-type` value: lower case, without parameters. */
export function mediaTypeOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const semicolon = contentType.indexOf(";");
  const type = (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim();
  return type === "" ? undefined : type.toLowerCase();
}

/** A node's media type as the answer may quote it: only when it is a plain `type/subtype`. */
function describeType(type: string | undefined): string {
  if (type === undefined) return "no content type";
  return type.length <= 64 && /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/.test(type)
    ? type
    : "an unreadable content type";
}

function isJsonSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

function opensJson(byte: number): boolean {
  return byte === 0x7b /* { */ || byte === 0x5b; /* [ */
}

function closerOf(opener: number): number {
  return opener === 0x7b ? 0x7d /* } */ : 0x5d; /* ] */
}
