// Tiny structural readers for untrusted JSON (collateral), naming the offending path.
import { isHex } from "./bytes.ts";

/** Collateral JSON that does not have the expected shape; `message` names the offending path. */
export class CollateralFormatError extends Error {
  readonly code = "collateral_format_error";
  constructor(message: string) {
    super(message);
    this.name = "CollateralFormatError";
  }
}

export type JsonObject = Record<string, unknown>;

export function asObject(value: unknown, path: string): JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new CollateralFormatError(`${path} is not an object`);
  }
  return value as JsonObject;
}

export function str(o: JsonObject, key: string, path: string): string {
  const v = o[key];
  if (typeof v !== "string") throw new CollateralFormatError(`${path}.${key} is not a string`);
  return v;
}

export function uint(o: JsonObject, key: string, path: string): number {
  const v = o[key];
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw new CollateralFormatError(`${path}.${key} is not a non-negative integer`);
  }
  return v;
}

/** A hex field of `bytes` bytes, returned lower case. */
export function hex(o: JsonObject, key: string, path: string, bytes: number): string {
  const v = str(o, key, path);
  if (v.length !== bytes * 2 || !isHex(v)) {
    throw new CollateralFormatError(`${path}.${key} is not ${bytes} bytes of hex`);
  }
  return v.toLowerCase();
}

export function list(o: JsonObject, key: string, path: string): unknown[] {
  const v = o[key];
  if (!Array.isArray(v)) throw new CollateralFormatError(`${path}.${key} is not an array`);
  return v;
}

export function date(o: JsonObject, key: string, path: string): Date {
  const d = new Date(str(o, key, path));
  if (Number.isNaN(d.getTime())) throw new CollateralFormatError(`${path}.${key} is not a date`);
  return d;
}

export function optionalStrings(o: JsonObject, key: string, path: string): string[] {
  if (o[key] === undefined) return [];
  return list(o, key, path).map((v, i) => {
    if (typeof v !== "string")
      throw new CollateralFormatError(`${path}.${key}[${i}] is not a string`);
    return v;
  });
}
