import { ERROR_CODES, ROUTING_HTTP_HEADER, parseRoutingHeader } from "@zml/contracts";
import type { ChatCompletionRequest, InferRequest, RoutingInfo } from "@zml/contracts";
import { request } from "undici";
import type { Dispatcher } from "undici";
import { ZmlApiError, ZmlConnectionError } from "./errors.ts";
import { parseSse } from "./sse.ts";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  InferResponse,
  InferStream,
  ModelInfo,
} from "./types.ts";

export interface ClientOptions {
  /** The gateway's root URL, e.g. `https://zml.example.com` (a trailing `/v1` is fine). */
  baseUrl: string;
  apiKey: string;
  /**
   * undici dispatcher for the connections, e.g. `new Agent({ allowH2: true })` for HTTP/2
   * over TLS. Default: undici's global dispatcher.
   */
  dispatcher?: Dispatcher;
  /** Longest wait for the answer to start, and the longest silence within it. */
  timeoutMs?: number;
}

export interface JobOptions extends CallOptions {
  /** Your id for the job (letters, digits, `-`, `_`; at most 64): the dedupe key. */
  jobId?: string;
}

/** `POST /v1/jobs` answer. */
export interface JobReceipt {
  object: "job";
  job_id: string;
  status: "queued";
  /** True when a job with this id was already queued within the dedupe window. */
  duplicate: boolean;
}

/** `GET /v1/jobs/{id}` answer. */
export interface JobView {
  object: "job";
  job_id: string;
  status: "queued" | "running" | "done" | "failed" | "expired";
  attempts: number;
  error_code: string | null;
  result: {
    outcome: "done" | "failed" | "expired";
    http_status: number;
    routing: RoutingInfo | null;
    /** The node's answer (a chat completion when done), or the gateway's error. */
    body: unknown;
  } | null;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Sent as `x-request-id` (letters, digits, `.`, `_`, `-`); the gateway logs it. */
  requestId?: string;
}

type Streamed<T> = T & { stream: true };
type Whole<T> = T & { stream?: false };

/** A ZML API client; see {@link createClient}. */
export interface ZmlClient {
  /**
   * ZML's native call (`POST /v1/infer`). Resolves to the completion with `routing` parsed
   * from the `x-zml-routing` header; with `stream: true`, to an {@link InferStream}.
   * Rejects with {@link ZmlApiError} (status, code, param) or {@link ZmlConnectionError}.
   */
  infer(req: Whole<InferRequest>, options?: CallOptions): Promise<InferResponse>;
  infer(req: Streamed<InferRequest>, options?: CallOptions): Promise<InferStream>;
  /** The OpenAI-compatible chat call (`POST /v1/chat/completions`); same answers as `infer`. */
  chat(req: Whole<ChatCompletionRequest>, options?: CallOptions): Promise<InferResponse>;
  chat(req: Streamed<ChatCompletionRequest>, options?: CallOptions): Promise<InferStream>;
  /** The models the fleet serves (`GET /v1/models`). */
  models(options?: CallOptions): Promise<ModelInfo[]>;
  /** Batch jobs (`/v1/jobs`), run on JetStream by the dispatchers' batch workers. */
  jobs: JobsApi;
}

export interface JobsApi {
  /** Queues one job; the same `jobId` within 10 minutes is the same job (`duplicate`). */
  submit(request: ChatCompletionRequest, options?: JobOptions): Promise<JobReceipt>;
  /** Queues many jobs in order; each gets a receipt. */
  submitMany(requests: ChatCompletionRequest[], options?: CallOptions): Promise<JobReceipt[]>;
  get(jobId: string, options?: CallOptions): Promise<JobView>;
  /**
   * Yields each job once it has finished (`done`, `failed` or `expired`), in the order
   * they finish, polling every `pollMs` (default 500). Ends when all have finished.
   */
  results(jobIds: string[], options?: CallOptions & { pollMs?: number }): AsyncGenerator<JobView>;
}

/**
 * Creates a client for the ZML API.
 *
 * ```ts
 * const zml = createClient({ baseUrl: "http://127.0.0.1:8080", apiKey });
 * const res = await zml.infer({ model, messages, policy: "interactive" });
 * res.choices[0].message.content; res.routing.node;
 * for await (const chunk of await zml.infer({ model, messages, stream: true })) …
 * ```
 */
export function createClient(options: ClientOptions): ZmlClient {
  const base = options.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");

  const send = async (
    method: "GET" | "POST",
    path: string,
    body: unknown,
    call: CallOptions | undefined,
  ) => {
    const controller = new AbortController();
    const signal = call?.signal
      ? AbortSignal.any([controller.signal, call.signal])
      : controller.signal;
    const headers: Record<string, string> = { authorization: `Bearer ${options.apiKey}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (call?.requestId) headers["x-request-id"] = call.requestId;
    try {
      const res = await request(`${base}${path}`, {
        method,
        headers,
        signal,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
        ...(options.timeoutMs
          ? { headersTimeout: options.timeoutMs, bodyTimeout: options.timeoutMs }
          : {}),
      });
      return { res, controller };
    } catch (err) {
      if (signal.aborted) throw err;
      throw new ZmlConnectionError(`cannot reach ${base}: ${(err as Error).message}`, err);
    }
  };

  const answer = async (path: string, body: { stream?: boolean }, call?: CallOptions) => {
    const { res, controller } = await send("POST", path, body, call);
    const meta = await metaOf(res);
    if (body.stream !== true) {
      const completion = (await readJson(res.body)) as ChatCompletion;
      return Object.assign(completion, meta) satisfies InferResponse;
    }
    if (!String(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
      discard(res.body);
      throw new ZmlApiError({
        status: res.statusCode,
        code: "invalid_response",
        message: "expected an event stream",
        requestId: meta.requestId,
        routing: meta.routing,
      });
    }
    return streamOf(res, meta, controller);
  };

  return {
    infer: ((req: InferRequest, call?: CallOptions) =>
      answer("/v1/infer", req, call)) as ZmlClient["infer"],
    chat: ((req: ChatCompletionRequest, call?: CallOptions) =>
      answer("/v1/chat/completions", req, call)) as ZmlClient["chat"],
    async models(call) {
      const { res } = await send("GET", "/v1/models", undefined, call);
      if (res.statusCode >= 400) throw await errorOf(res);
      return ((await readJson(res.body)) as { data: ModelInfo[] }).data;
    },
    jobs: jobsApi(send),
  };
}

type Send = (
  method: "GET" | "POST",
  path: string,
  body: unknown,
  call: CallOptions | undefined,
) => Promise<{ res: Dispatcher.ResponseData }>;

const FINISHED = new Set(["done", "failed", "expired"]);

function jobsApi(send: Send): JobsApi {
  const json = async (res: Dispatcher.ResponseData) => {
    if (res.statusCode >= 400) throw await errorOf(res);
    return readJson(res.body);
  };
  const api: JobsApi = {
    async submit(request, options) {
      const body = { request, ...(options?.jobId ? { job_id: options.jobId } : {}) };
      const { res } = await send("POST", "/v1/jobs", body, options);
      return (await json(res)) as JobReceipt;
    },
    async submitMany(requests, options) {
      const receipts: JobReceipt[] = [];
      for (const r of requests) receipts.push(await api.submit(r, options));
      return receipts;
    },
    async get(jobId, options) {
      const { res } = await send(
        "GET",
        `/v1/jobs/${encodeURIComponent(jobId)}`,
        undefined,
        options,
      );
      return (await json(res)) as JobView;
    },
    async *results(jobIds, options) {
      const open = new Set(jobIds);
      while (open.size > 0) {
        for (const id of [...open]) {
          const view = await api.get(id, options);
          if (FINISHED.has(view.status) && view.result) {
            open.delete(id);
            yield view;
          }
        }
        if (open.size > 0) await sleep(options?.pollMs ?? 500, options?.signal);
      }
    },
  };
  return api;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), reject(signal.reason as Error)), {
      once: true,
    });
  });
}

type Answer = Dispatcher.ResponseData;

/** Checks the status and reads the routing header; an error answer becomes ZmlApiError. */
async function metaOf(res: Answer) {
  if (res.statusCode >= 400) throw await errorOf(res);
  const requestId = header(res, "x-request-id");
  const raw = header(res, ROUTING_HTTP_HEADER);
  let routing: RoutingInfo;
  try {
    if (raw === undefined) throw new Error("missing");
    routing = parseRoutingHeader(raw);
  } catch {
    discard(res.body);
    throw new ZmlApiError({
      status: res.statusCode,
      code: "invalid_response",
      message: `answer without a valid ${ROUTING_HTTP_HEADER} header`,
      requestId,
    });
  }
  return { routing, requestId };
}

function streamOf(
  res: Answer,
  meta: { routing: RoutingInfo; requestId: string | undefined },
  controller: AbortController,
): InferStream {
  const interrupted = (message: string) =>
    new ZmlApiError({
      status: res.statusCode,
      code: "stream_interrupted",
      message,
      requestId: meta.requestId,
      routing: meta.routing,
    });
  const chunks = async function* (): AsyncGenerator<ChatCompletionChunk> {
    try {
      for await (const ev of parseSse(res.body)) {
        if (ev.event === "error") throw errorOfEnvelope(ev.data, undefined, meta);
        if (ev.data === "[DONE]") return;
        yield JSON.parse(ev.data) as ChatCompletionChunk;
      }
    } catch (err) {
      if (err instanceof ZmlApiError || controller.signal.aborted) throw err;
      throw interrupted(`stream broke: ${(err as Error).message}`);
    } finally {
      discard(res.body);
    }
    throw interrupted("stream ended before [DONE]");
  };
  const iterator = chunks();
  return {
    ...meta,
    abort: () => controller.abort(),
    [Symbol.asyncIterator]: () => iterator,
  };
}

async function errorOf(res: Answer): Promise<ZmlApiError> {
  const text = await res.body.text().catch(() => "");
  const retry = Number(header(res, "retry-after"));
  const meta = {
    requestId: header(res, "x-request-id"),
    routing: safeRouting(header(res, ROUTING_HTTP_HEADER)),
  };
  return errorOfEnvelope(
    text,
    res.statusCode,
    meta,
    Number.isFinite(retry) && retry > 0 ? retry : undefined,
  );
}

/** Builds ZmlApiError from an OpenAI error envelope (or whatever the body is). */
function errorOfEnvelope(
  text: string,
  status: number | undefined,
  meta: { requestId: string | undefined; routing: RoutingInfo | undefined },
  retryAfterS?: number,
): ZmlApiError {
  let error: { message?: unknown; code?: unknown; param?: unknown } = {};
  try {
    const parsed = JSON.parse(text) as { error?: typeof error; message?: unknown };
    error = parsed.error ?? parsed;
  } catch {
    // not JSON: keep the text as the message
  }
  const code = typeof error.code === "string" ? error.code : undefined;
  const known = code !== undefined && Object.hasOwn(ERROR_CODES, code);
  const finalStatus =
    status ?? (known ? ERROR_CODES[code as keyof typeof ERROR_CODES].status : 502);
  return new ZmlApiError({
    status: finalStatus,
    code: code ?? `http_${finalStatus}`,
    message: typeof error.message === "string" ? error.message : text || `HTTP ${finalStatus}`,
    param: typeof error.param === "string" ? error.param : null,
    retryAfterS,
    requestId: meta.requestId,
    routing: meta.routing,
  });
}

function safeRouting(raw: string | undefined): RoutingInfo | undefined {
  try {
    return raw === undefined ? undefined : parseRoutingHeader(raw);
  } catch {
    return undefined;
  }
}

function header(res: Answer, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Drops a body that will not be read; undici reports the abort as an error event. */
function discard(body: Answer["body"]): void {
  if (body.destroyed) return;
  body.on("error", () => undefined);
  body.destroy();
}

async function readJson(body: Answer["body"]): Promise<unknown> {
  try {
    return await body.json();
  } catch (err) {
    throw new ZmlConnectionError(`answer body unreadable: ${(err as Error).message}`, err);
  }
}
