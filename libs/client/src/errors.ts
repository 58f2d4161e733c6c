import type { RoutingInfo } from "./routing.ts";

/**
 * An error answer from the ZML API (or a stream that ended with an error event). `code` is
 * the API's machine-readable code (e.g. `tier_not_allowed`, `unknown_model`, `rate_limited`,
 * `saturated`, `session_node_unavailable`); an upstream node's own error that carries no
 * such code gets `http_<status>`. `param` names the offending field. A stream that failed
 * after it began has `status` 502 (its HTTP status was 200).
 */
export class ZmlApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly param: string | null;
  /** Seconds to wait before retrying, from `Retry-After`. */
  readonly retryAfterS: number | undefined;
  readonly requestId: string | undefined;
  /** The routing decision, when the failure happened after one was made. */
  readonly routing: RoutingInfo | undefined;
  constructor(init: {
    status: number;
    code: string;
    message: string;
    param?: string | null;
    retryAfterS?: number | undefined;
    requestId?: string | undefined;
    routing?: RoutingInfo | undefined;
  }) {
    super(init.message);
    this.name = "ZmlApiError";
    this.status = init.status;
    this.code = init.code;
    this.param = init.param ?? null;
    this.retryAfterS = init.retryAfterS;
    this.requestId = init.requestId;
    this.routing = init.routing;
  }
}

/** The API could not be reached, or the connection broke (the cause says how). */
export class ZmlConnectionError extends Error {
  readonly code = "connection_error";
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    this.name = "ZmlConnectionError";
  }
}
