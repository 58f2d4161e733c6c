import { ZmlConnectionError } from "./errors.ts";

/** The `fetch` the client calls: the global one unless the caller brings another. */
export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

export interface CallOptions {
  signal?: AbortSignal;
  /** Sent as `x-request-id` (letters, digits, `.`, `_`, `-`); the gateway logs it. */
  requestId?: string;
}

/** One HTTP exchange in flight: the answer, and how to stop reading it. */
export interface Exchange {
  res: Response;
  /** Aborts the request (and the body still being read). */
  abort(): void;
  aborted(): boolean;
  /** Re-arms the silence timer; call it for each body chunk read. */
  alive(): void;
  /** Stops the silence timer once the answer has been read. */
  done(): void;
}

export type Send = (
  method: "GET" | "POST" | "DELETE",
  path: string,
  body: unknown,
  call: CallOptions | undefined,
) => Promise<Exchange>;

/** A body sent as these bytes with this content type, instead of as JSON. */
export class RawBody {
  readonly bytes: Uint8Array;
  readonly contentType: string;
  constructor(bytes: Uint8Array, contentType: string) {
    this.bytes = bytes;
    this.contentType = contentType;
  }
}

/**
 * Builds the client's one way to talk to the gateway: bearer auth, JSON bodies, the caller's
 * abort signal, and a silence timeout (`timeoutMs`: the longest wait for the answer to
 * start, and the longest gap between body chunks after that).
 */
export function createSend(options: {
  base: string;
  apiKey: string;
  fetch: FetchLike;
  timeoutMs: number | undefined;
}): Send {
  return async (method, path, body, call) => {
    const controller = new AbortController();
    const signal = call?.signal
      ? AbortSignal.any([controller.signal, call.signal])
      : controller.signal;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timedOut = false;
    const alive = () => {
      if (options.timeoutMs === undefined) return;
      clearTimeout(timer);
      timer = setTimeout(() => {
        timedOut = true;
        controller.abort(new ZmlConnectionError(`no answer within ${options.timeoutMs} ms`));
      }, options.timeoutMs);
    };
    const headers: Record<string, string> = { authorization: `Bearer ${options.apiKey}` };
    const raw = body instanceof RawBody ? body : undefined;
    if (body !== undefined) headers["content-type"] = raw?.contentType ?? "application/json";
    if (call?.requestId) headers["x-request-id"] = call.requestId;
    alive();
    try {
      const res = await options.fetch(`${options.base}${path}`, {
        method,
        headers,
        signal,
        ...(body === undefined
          ? {}
          : {
              body:
                raw === undefined ? JSON.stringify(body) : (raw.bytes as Uint8Array<ArrayBuffer>),
            }),
      });
      return {
        res,
        abort: () => controller.abort(),
        aborted: () => signal.aborted && !timedOut,
        alive,
        done: () => clearTimeout(timer),
      };
    } catch (err) {
      clearTimeout(timer);
      if (signal.aborted && !timedOut) throw err;
      const why = timedOut ? `no answer within ${options.timeoutMs} ms` : causeOf(err);
      throw new ZmlConnectionError(`cannot reach ${options.base}: ${why}`, err);
    }
  };
}

/** fetch reports "fetch failed" and keeps the reason (ECONNREFUSED, …) in `cause`. */
function causeOf(err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } };
  return [e.message, e.cause?.code ?? e.cause?.message].filter(Boolean).join(": ");
}
