import { ZmlError, toOpenAiError } from "@zml/contracts";
import type { ErrorCode } from "@zml/contracts";
import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * Longest path parameter the router matches (fastify's default is 100): above every key a
 * route accepts, even percent-encoded (a model id has up to 256 characters), so the route's
 * own check names what is wrong; longer ones get 400 naming `path`.
 */
export const MAX_PATH_PARAM_CHARS = 1024;

/** Raised by the body deadline (see `admission/body-deadline.ts`) through the body stream. */
export class BodyTimeoutError extends Error {
  readonly code = "request_timeout";
  constructor() {
    super("request body not received in time");
    this.name = "BodyTimeoutError";
  }
}

/** The one place that turns anything thrown while serving into a ZmlError. */
export function toZmlError(err: unknown): ZmlError {
  if (err instanceof ZmlError) return err;
  if (err instanceof BodyTimeoutError) {
    return new ZmlError("request_timeout", "request body was not received in time", {
      param: "body",
    });
  }
  const code = (err as { code?: string }).code;
  switch (code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ZmlError("payload_too_large", "request body is larger than the limit", {
        param: "body",
      });
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ZmlError("unsupported_media_type", "unsupported content type", {
        param: "content-type",
      });
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new ZmlError("invalid_request", "request body length does not match Content-Length", {
        param: "content-length",
      });
    case "FST_ERR_BAD_URL":
      return new ZmlError("invalid_request", "malformed URL", { param: "path" });
    case "FST_ERR_MAX_PARAM_LENGTH":
      return new ZmlError(
        "invalid_request",
        `a path parameter is longer than ${MAX_PATH_PARAM_CHARS} characters`,
        { param: "path" },
      );
    default:
      break;
  }
  const status = (err as { statusCode?: number }).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return new ZmlError("invalid_request", (err as Error).message);
  }
  return new ZmlError("internal_error", "internal error");
}

/** The code of the error each reply was answered with, for the metrics of its response. */
const sentCodes = new WeakMap<FastifyReply, ErrorCode>();

/** The code of the error `sendError` answered this reply with, if it did. */
export function errorCodeSent(reply: FastifyReply): ErrorCode | undefined {
  return sentCodes.get(reply);
}

/** Sends the OpenAI error envelope with the error's status (and Retry-After). */
export function sendError(reply: FastifyReply, error: ZmlError): FastifyReply {
  sentCodes.set(reply, error.code);
  if (error.retryAfterS) reply.header("retry-after", String(error.retryAfterS));
  return reply.code(error.status).send(toOpenAiError(error.toBody()));
}

/** True for HTTP/2 requests, where connection-specific headers are forbidden. */
export function isHttp2(req: FastifyRequest): boolean {
  return req.raw.httpVersionMajor >= 2;
}
