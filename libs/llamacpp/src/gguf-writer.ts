/**
 * A writer of GGUF version 3, the file format llama.cpp loads models from (its layout is
 * described in ggml's `gguf.h`): a header, typed metadata key/value pairs, tensor
 * descriptions, then the tensor data, each tensor aligned to `general.alignment` (32 bytes).
 * All integers little-endian. Only what a test model needs: scalar, string and array values,
 * and `F32` tensors.
 */

/** GGUF value type tags (`enum gguf_type`). */
const GGUF_TYPE = {
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
} as const;

/** ggml tensor type tag of 32-bit floats (`GGML_TYPE_F32`). */
const GGML_TYPE_F32 = 0;
const ALIGNMENT = 32;
const MAGIC = 0x46554747; // "GGUF" read as a little-endian uint32
const VERSION = 3;

/** A metadata value with its GGUF type made explicit (JS numbers do not say which). */
export type GgufValue =
  | { readonly type: "uint32"; readonly value: number }
  | { readonly type: "int32"; readonly value: number }
  | { readonly type: "float32"; readonly value: number }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "string[]"; readonly value: readonly string[] }
  | { readonly type: "float32[]"; readonly value: readonly number[] }
  | { readonly type: "int32[]"; readonly value: readonly number[] };

/** One F32 tensor; `shape` in ggml order (`ne[0]`, the contiguous dimension, first). */
export interface GgufTensor {
  readonly name: string;
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

/** Thrown for a tensor whose data does not fill its shape, or a non-integer metadata value. */
export class GgufWriteError extends Error {
  readonly code = "gguf_invalid";
  constructor(message: string) {
    super(message);
    this.name = "GgufWriteError";
  }
}

/** Serialises metadata and tensors into one GGUF file's bytes. */
export function writeGguf(
  metadata: ReadonlyMap<string, GgufValue>,
  tensors: readonly GgufTensor[],
): Uint8Array {
  const out = new ByteSink();
  out.u32(MAGIC);
  out.u32(VERSION);
  out.u64(tensors.length);
  out.u64(metadata.size);
  for (const [key, value] of metadata) {
    out.string(key);
    writeValue(out, key, value);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const tensor of tensors) {
    const elements = tensor.shape.reduce((n, d) => n * d, 1);
    if (elements !== tensor.data.length) {
      throw new GgufWriteError(
        `tensor ${tensor.name}: shape [${tensor.shape.join(", ")}] holds ${elements} values, data has ${tensor.data.length}`,
      );
    }
    out.string(tensor.name);
    out.u32(tensor.shape.length);
    for (const dim of tensor.shape) out.u64(dim);
    out.u32(GGML_TYPE_F32);
    out.u64(offset);
    offsets.push(offset);
    offset = align(offset + tensor.data.byteLength);
  }
  out.padTo(ALIGNMENT);
  const dataStart = out.length;
  tensors.forEach((tensor, i) => {
    out.padTo(ALIGNMENT);
    if (out.length - dataStart !== offsets[i]) {
      throw new GgufWriteError(`tensor ${tensor.name}: data misplaced`);
    }
    out.bytes(new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength));
  });
  out.padTo(ALIGNMENT);
  return out.result();
}

function writeValue(out: ByteSink, key: string, v: GgufValue): void {
  const integer = (n: number) => {
    if (!Number.isInteger(n)) throw new GgufWriteError(`${key}: ${n} is not an integer`);
    return n;
  };
  switch (v.type) {
    case "uint32":
      out.u32(GGUF_TYPE.uint32);
      out.u32(integer(v.value));
      return;
    case "int32":
      out.u32(GGUF_TYPE.int32);
      out.i32(integer(v.value));
      return;
    case "float32":
      out.u32(GGUF_TYPE.float32);
      out.f32(v.value);
      return;
    case "bool":
      out.u32(GGUF_TYPE.bool);
      out.u8(v.value ? 1 : 0);
      return;
    case "string":
      out.u32(GGUF_TYPE.string);
      out.string(v.value);
      return;
    case "string[]":
      out.u32(GGUF_TYPE.array);
      out.u32(GGUF_TYPE.string);
      out.u64(v.value.length);
      for (const s of v.value) out.string(s);
      return;
    case "float32[]":
      out.u32(GGUF_TYPE.array);
      out.u32(GGUF_TYPE.float32);
      out.u64(v.value.length);
      for (const f of v.value) out.f32(f);
      return;
    case "int32[]":
      out.u32(GGUF_TYPE.array);
      out.u32(GGUF_TYPE.int32);
      out.u64(v.value.length);
      for (const n of v.value) out.i32(integer(n));
      return;
  }
}

function align(n: number): number {
  return Math.ceil(n / ALIGNMENT) * ALIGNMENT;
}

/** A growable little-endian byte buffer. */
class ByteSink {
  private buffer = new Uint8Array(1 << 16);
  private view = new DataView(this.buffer.buffer);
  length = 0;

  private reserve(n: number): number {
    if (this.length + n > this.buffer.length) {
      let size = this.buffer.length * 2;
      while (size < this.length + n) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.buffer.subarray(0, this.length));
      this.buffer = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }
  u8(n: number): void {
    this.view.setUint8(this.reserve(1), n);
  }
  u32(n: number): void {
    this.view.setUint32(this.reserve(4), n, true);
  }
  i32(n: number): void {
    this.view.setInt32(this.reserve(4), n, true);
  }
  f32(n: number): void {
    this.view.setFloat32(this.reserve(4), n, true);
  }
  u64(n: number): void {
    this.view.setBigUint64(this.reserve(8), BigInt(n), true);
  }
  string(s: string): void {
    const bytes = new TextEncoder().encode(s);
    this.u64(bytes.length);
    this.bytes(bytes);
  }
  bytes(b: Uint8Array): void {
    const at = this.reserve(b.length); // may replace the buffer: reserve first
    this.buffer.set(b, at);
  }
  padTo(alignment: number): void {
    const pad = (alignment - (this.length % alignment)) % alignment;
    this.reserve(pad); // fresh bytes are zero
  }
  result(): Uint8Array {
    return this.buffer.slice(0, this.length);
  }
}
