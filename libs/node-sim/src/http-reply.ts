import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";

const JSON_TYPE = "application/json";

/** Answers `body` (JSON text) with `status`, its length declared. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...headers,
    "content-type": JSON_TYPE,
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

/** vLLM's and TGI's (FastAPI's, axum's) answer to a path they do not serve. */
export function notFound(res: ServerResponse): void {
  sendJson(res, 404, '{"detail":"Not Found"}');
}

export function methodNotAllowed(res: ServerResponse): void {
  sendJson(res, 405, '{"detail":"Method Not Allowed"}');
}

export function isHttp2(req: IncomingMessage): boolean {
  return req.httpVersionMajor === 2;
}

/**
 * node:http2's compatibility API has every member the handlers use (method, url, headers,
 * the body stream, writeHead/write/end, "close", socket.destroy, which resets the stream), so
 * they take it as the HTTP/1.1 types; what differs per protocol is handled where it is used.
 */
export function asHttp1(
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
): [IncomingMessage, ServerResponse] {
  return [req as unknown as IncomingMessage, res as unknown as ServerResponse];
}
