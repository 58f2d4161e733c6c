import { constants as http2Constants } from "node:http2";
import type { Http2ServerRequest } from "node:http2";
import type { FastifyReply, FastifyRequest } from "fastify";
import { isHttp2 } from "../http/errors.ts";

export interface UnreadBodyOptions {
  /** Bytes read into the void at most; a longer body gets the connection closed. */
  maxBytes: number;
  /** Longest wait for the rest of the body before answering anyway. */
  timeoutMs: number;
  /**
   * Read the rest before answering (for an oversize body: the client then sees the answer
   * rather than a reset while still uploading). Without it the answer goes out at once.
   */
  waitForEnd: boolean;
}

/**
 * Prepares the answer to a request whose body will not be used (too large, too slow).
 *
 * HTTP/1.1: the rest of the body is read into the void. Answering while the client is still
 * uploading and closing the connection races the client's writes (it can see a broken pipe
 * instead of the answer), so with `waitForEnd` the answer waits for the body to end; a body
 * that ends in time leaves the connection reusable, anything else closes it after the answer.
 *
 * HTTP/2: the stream is reset with NO_ERROR once the answer is out, which tells the client
 * to stop sending (RFC 9113 §8.1); the connection's other streams are untouched.
 */
export async function settleUnreadBody(
  req: FastifyRequest,
  reply: FastifyReply,
  options: UnreadBodyOptions,
): Promise<void> {
  const raw = req.raw;
  raw.unpipe();
  if (isHttp2(req)) {
    const { stream } = raw as unknown as Http2ServerRequest;
    reply.raw.once("finish", () => stream.close(http2Constants.NGHTTP2_NO_ERROR));
    raw.resume();
    return;
  }
  const ended = drain(req, options.maxBytes);
  raw.resume();
  const clean = options.waitForEnd ? await withTimeout(ended, options.timeoutMs) : false;
  if (!clean) reply.header("connection", "close");
}

/** Resolves true when the body ends, false when it is cut or the client goes away. */
function drain(req: FastifyRequest, maxBytes: number): Promise<boolean> {
  const raw = req.raw;
  if (raw.readableEnded) return Promise.resolve(true);
  return new Promise((resolve) => {
    let drained = 0;
    raw.on("data", (chunk: Buffer) => {
      drained += chunk.length;
      if (drained > maxBytes) {
        resolve(false);
        raw.pause();
      }
    });
    raw.once("end", () => resolve(true));
    raw.once("close", () => resolve(false));
    raw.once("error", () => resolve(false));
  });
}

async function withTimeout(p: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
