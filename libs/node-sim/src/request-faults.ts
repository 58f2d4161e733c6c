import type { IncomingMessage, ServerResponse } from "node:http";
import { constants as h2 } from "node:http2";
import type { Http2ServerRequest } from "node:http2";
import type { Duplex } from "node:stream";
import { isHttp2, sendJson } from "./http-reply.ts";
import { errorBodyJson } from "./openai-request.ts";
import type { SimFault } from "./types.ts";

/**
 * Answers an inference payload as the request-stage `fault` says (`status`, `reset`,
 * `hang`), instead of generating.
 */
export function answerRequestFault(
  req: IncomingMessage,
  res: ServerResponse,
  fault: SimFault,
  nodeId: string,
): void {
  if (fault.kind === "reset") {
    // HTTP/2: the stream is reset (RST_STREAM), not the connection the others share.
    if (isHttp2(req)) {
      (req as unknown as Http2ServerRequest).stream.close(h2.NGHTTP2_INTERNAL_ERROR);
    } else if ("resetAndDestroy" in req.socket) {
      req.socket.resetAndDestroy();
    } else {
      // An HTTP/1.1 connection of an h2c node runs on a replaying stream, not a TCP socket.
      (req.socket as Duplex).destroy();
    }
  } else if (fault.kind === "status") {
    const retryAfter = fault.retryAfterS ?? (fault.status === 429 ? 1 : undefined);
    const headers: Record<string, string> =
      retryAfter === undefined ? {} : { "retry-after": String(retryAfter) };
    const message = `simulated fault on node ${nodeId}: status ${fault.status}`;
    sendJson(
      res,
      fault.status,
      errorBodyJson({ status: fault.status, message, param: null }),
      headers,
    );
  }
  // `hang`: the request was read and is never answered; close() or the client ends it.
}
