import type { ServerResponse } from "node:http";

/**
 * One chunk of HTTP/1.1 chunked transfer coding (RFC 9112 §7.1): the size in hex, CRLF, the
 * data, CRLF; in one buffer. Empty data would be the last chunk, so it is refused.
 */
export function encodeChunk(data: Uint8Array): Buffer {
  if (data.byteLength === 0) throw new RangeError("an empty chunk ends the body");
  const size = data.byteLength.toString(16);
  const out = Buffer.allocUnsafe(size.length + 2 + data.byteLength + 2);
  let at = out.write(size, 0, "latin1");
  out[at++] = 0x0d;
  out[at++] = 0x0a;
  out.set(data, at);
  at += data.byteLength;
  out[at++] = 0x0d;
  out[at] = 0x0a;
  return out;
}

/** What of Node's ServerResponse {@link writeBodyChunk} reads (Node 24's `_http_outgoing`). */
interface ChunkedResponse {
  /** True when Node frames this response's body in chunks (HTTP/1.1, no length). */
  chunkedEncoding?: boolean;
  /** Bytes the response holds itself, not yet handed to its socket (a pipelined response). */
  outputSize?: number;
}

/**
 * Writes a piece of a streamed body. `res.write` of a chunked HTTP/1.1 response costs four
 * socket writes (size, CRLF, data, CRLF), gathered by a cork until the next tick and sent as
 * one `writev`, and a stream writes each of its tokens this way. Once the response's head is
 * on its socket, the chunk goes to the socket framed in one buffer instead: the same bytes,
 * one write. Anything else (the first write, which carries the head; an HTTP/2 stream; a
 * pipelined response still waiting for its socket; a body with a declared length) goes
 * through `res.write`. Node's own `end()` then closes the body with its last chunk as usual.
 *
 * Relies on Node's ServerResponse keeping `chunkedEncoding` and `outputSize` as they are in
 * Node 24 (the project's pinned runtime); were they to go, the check fails and every chunk
 * takes `res.write` again.
 */
export function writeBodyChunk(res: ServerResponse, data: Uint8Array, headSent: boolean): void {
  const socket = res.socket;
  const chunked = res as ChunkedResponse;
  if (
    headSent &&
    data.byteLength > 0 &&
    chunked.chunkedEncoding === true &&
    chunked.outputSize === 0 &&
    socket !== null &&
    !socket.destroyed
  ) {
    socket.write(encodeChunk(data));
    return;
  }
  res.write(data);
}
