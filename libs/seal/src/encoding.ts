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

export const utf8 = new TextEncoder();
