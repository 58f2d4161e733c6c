import { SealedChannelError } from "./errors.ts";
import type { SealedErrorCode } from "./errors.ts";

const BASE64URL = /^[A-Za-z0-9_-]*$/;

export function toBase64url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

/**
 * Decodes base64url without padding. Node's decoder skips characters it does not know, so the
 * alphabet is checked first: a mangled value is an error, never other bytes.
 */
export function fromBase64url(text: string, code: SealedErrorCode, param: string): Buffer {
  if (!BASE64URL.test(text) || text.length % 4 === 1) {
    throw new SealedChannelError(code, `${param}: not base64url without padding`, param);
  }
  return Buffer.from(text, "base64url");
}

const BLANK_LINE = Buffer.from("\n\n");

/**
 * One server-sent event whose data is `sealed` in base64url, as the bytes to write: built in
 * one buffer of its exact size, the base64url text written into it as it is made (no framing
 * string, no UTF-8 pass over it). `head` is the event's lines before the data's value, e.g.
 * `data: `. (An encoder writing straight into the buffer from JavaScript measured slower than
 * node's native base64url and a latin1 write, so the one string left is node's.)
 */
export function sseFrame(head: Buffer, sealed: Uint8Array): Buffer {
  const length = Math.ceil((sealed.length * 4) / 3);
  const frame = Buffer.allocUnsafe(head.length + length + BLANK_LINE.length);
  head.copy(frame, 0);
  frame.write(toBase64url(sealed), head.length, length, "latin1");
  BLANK_LINE.copy(frame, head.length + length);
  return frame;
}

export const utf8 = new TextEncoder();
