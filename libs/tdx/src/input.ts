import { QuoteParseError } from "./errors.ts";

/**
 * Largest quote accepted. Real quotes are about 5 KB; the GCP/ioctl path pads them to 8000
 * bytes. The cap keeps a hostile input from costing more than a bounded decode.
 */
export const MAX_QUOTE_BYTES = 64 * 1024;

const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64URL_RE = /^[A-Za-z0-9_-]*$/;

/**
 * Decodes a quote given as raw bytes, hex (optionally `0x`-prefixed) or base64 / base64url.
 * Whitespace in text input is ignored. Hex wins when a string is valid as both, which no
 * real quote is: base64 of a TDX quote starts with `BAACAIEA` (v4) or `BQACAIEA` (v5).
 */
export function decodeQuoteInput(input: Uint8Array | string): Uint8Array {
  if (input instanceof Uint8Array) {
    if (input.length > MAX_QUOTE_BYTES) throw tooLarge(input.length);
    return input.slice();
  }
  if (typeof input !== "string") {
    throw new QuoteParseError("input", null, "expected a Uint8Array or a hex/base64 string");
  }
  if (input.length > MAX_QUOTE_BYTES * 3) throw tooLarge(input.length);
  let text = input.replace(/\s+/g, "");
  if (text.startsWith("0x") || text.startsWith("0X")) text = text.slice(2);
  if (text.length === 0) throw new QuoteParseError("input", null, "empty input");
  let bytes: Buffer;
  if (/^[0-9a-fA-F]+$/.test(text)) {
    if (text.length % 2 !== 0) throw new QuoteParseError("input", null, "odd-length hex");
    bytes = Buffer.from(text, "hex");
  } else if (BASE64_RE.test(text) && text.length % 4 === 0) {
    bytes = Buffer.from(text, "base64");
  } else if (BASE64URL_RE.test(text) && text.length % 4 !== 1) {
    bytes = Buffer.from(text, "base64url");
  } else {
    throw new QuoteParseError("input", null, "text input is neither hex nor base64");
  }
  if (bytes.length > MAX_QUOTE_BYTES) throw tooLarge(bytes.length);
  return new Uint8Array(bytes);
}

function tooLarge(size: number): QuoteParseError {
  return new QuoteParseError(
    "input",
    null,
    `${size} bytes exceeds the ${MAX_QUOTE_BYTES}-byte cap`,
  );
}
