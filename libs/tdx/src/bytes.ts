// Byte helpers shared by the parser and the verifier. Every read is bounds-checked by the
// caller through `ByteReader`, so a short or lying quote can never read out of bounds.
import { QuoteParseError } from "./errors.ts";

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/;

/** Lower-case hex of the bytes, in byte order (never reversed). */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** True when `s` is an even-length hex string (empty allowed). */
export function isHex(s: string): boolean {
  return HEX_RE.test(s);
}

/** Bytes of an even-length hex string; `undefined` when it is not one. */
export function fromHex(s: string): Uint8Array | undefined {
  if (!isHex(s)) return undefined;
  return new Uint8Array(Buffer.from(s, "hex"));
}

/** Byte-wise equality (not constant time: for public values only). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Bounds-checked little-endian reads over one buffer, naming the field on failure. */
export class ByteReader {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  need(field: string, offset: number, size: number): void {
    if (offset < 0 || size < 0 || offset + size > this.bytes.length) {
      throw new QuoteParseError(
        field,
        offset,
        `needs ${size} bytes but the quote has only ${Math.max(0, this.bytes.length - offset)} left`,
      );
    }
  }

  u16(field: string, offset: number): number {
    this.need(field, offset, 2);
    return this.view.getUint16(offset, true);
  }

  u32(field: string, offset: number): number {
    this.need(field, offset, 4);
    return this.view.getUint32(offset, true);
  }

  /** A copy, so parsed results never alias the caller's buffer. */
  slice(field: string, offset: number, size: number): Uint8Array {
    this.need(field, offset, size);
    return this.bytes.slice(offset, offset + size);
  }
}
