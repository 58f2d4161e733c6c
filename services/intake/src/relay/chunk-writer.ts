import type { ServerResponse } from "node:http";

/**
 * Writes a streamed answer's chunks to an HTTP/1.1 client with one socket write each.
 *
 * `res.write` on a chunked response corks the socket and queues a tick to uncork it, then
 * buffers four writes (the chunk's size as a string, CRLF, the data, CRLF) that the uncork
 * joins in a `writev`, converting the string in C++. At fleet scale there is one such write
 * per client stream and turn; that machinery cost intake more than half of what the kernel
 * spends on the write itself, and made half of intake's allocations per token
 * (`test/bench/on-cpu.ts --fleet`, `run.ts --alloc`; docs/performance.md).
 *
 * Here the chunk is framed (`<size in hex>\r\n<data>\r\n`) into a scratch buffer and written
 * to the response's socket as one buffer, whenever that is the same as writing it through
 * the response: the response is HTTP/1.1 chunked and not ended, it has its socket (it is the
 * connection's current response), its head went out with an earlier write (`headSent`), and
 * nothing of it is queued (an empty `writableLength`: the response's own buffer and its
 * socket's). Otherwise the chunk goes through `res.write`, so bytes never overtake bytes
 * queued before them, and `end()` writes the terminating chunk after all of them.
 *
 * The scratch buffer is reused only while every write from it completed at once: Node then
 * handed the bytes to the kernel inside `write()`, so the buffer is free again. A write that
 * did not complete (a client that reads slowly) holds the buffer until it does, and the
 * writer takes a new one, so bytes a write still needs are never overwritten. Copying a
 * token's few hundred bytes costs less than the allocations it saves; a fresh buffer per
 * chunk, instead of the reused one, doubled intake's GC.
 */
export class ChunkWriter {
  private scratch: Buffer;
  /** Views of the scratch buffer by length, reused while the buffer is. */
  private views = new Map<number, Buffer>();

  private readonly scratchBytes: number;

  constructor(scratchBytes = 64 * 1024) {
    this.scratchBytes = scratchBytes;
    this.scratch = Buffer.allocUnsafeSlow(scratchBytes);
  }

  /**
   * Writes one chunk of `res`'s body. `headSent`: the response's head went out (Node sends it
   * with the first body write; `write` through the response until then).
   */
  write(res: ServerResponse, data: Uint8Array, headSent: boolean): void {
    const socket = res.socket;
    const size = data.byteLength;
    const framedBytes = sizeDigits(size) + size + 4;
    if (
      !headSent ||
      size === 0 ||
      res.chunkedEncoding !== true ||
      res.writableEnded ||
      socket === null ||
      socket.destroyed ||
      !socket.writable ||
      res.writableLength !== 0 ||
      framedBytes > this.scratchBytes
    ) {
      res.write(data);
      return;
    }
    let view = this.views.get(framedBytes);
    if (view === undefined) {
      view = this.scratch.subarray(0, framedBytes);
      this.views.set(framedBytes, view);
    }
    frameChunkInto(view, data);
    socket.write(view);
    if (socket.writableLength !== 0) {
      // Queued (a slow client, or a socket corked in this tick): the bytes are still needed.
      this.scratch = Buffer.allocUnsafeSlow(this.scratchBytes);
      this.views = new Map();
    }
  }
}

const HEX = Buffer.from("0123456789abcdef", "latin1");
const CR = 0x0d;
const LF = 0x0a;

/** Hex digits of a chunk's size. */
function sizeDigits(size: number): number {
  let digits = 1;
  for (let rest = size >>> 4; rest > 0; rest >>>= 4) digits++;
  return digits;
}

/**
 * Writes `data` framed as one HTTP/1.1 chunk (RFC 9112 §7.1: its size in hex, CRLF, the
 * bytes, CRLF) into `out`, which is exactly that long.
 */
export function frameChunkInto(out: Uint8Array, data: Uint8Array): void {
  const size = data.byteLength;
  const digits = out.byteLength - size - 4;
  for (let i = digits - 1, rest = size; i >= 0; i--, rest >>>= 4) out[i] = HEX[rest & 0xf]!;
  out[digits] = CR;
  out[digits + 1] = LF;
  out.set(data, digits + 2);
  out[digits + 2 + size] = CR;
  out[digits + 3 + size] = LF;
}
