import { readAnswer, readApiJson } from "./answer.ts";
import { createJobsApi } from "./jobs.ts";
import type { JobsApi } from "./jobs.ts";
import { createSessionsApi } from "./sessions.ts";
import type { SessionsApi } from "./sessions.ts";
import { createSend } from "./transport.ts";
import type { CallOptions, FetchLike } from "./transport.ts";
import type {
  ChatCompletionRequest,
  InferRequest,
  InferResponse,
  InferStream,
  ModelInfo,
} from "./types.ts";

export interface ClientOptions {
  /** The gateway's root URL, e.g. `https://zml.example.com` (a trailing `/v1` is fine). */
  baseUrl: string;
  apiKey: string;
  /**
   * The `fetch` to call, default the global one. Bring undici's for HTTP/2 over TLS:
   * `(url, init) => undici.fetch(url, { ...init, dispatcher: new Agent({ allowH2: true }) })`.
   */
  fetch?: FetchLike;
  /** Longest wait for the answer to start, and the longest silence within a stream. */
  timeoutMs?: number;
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
  /** Tier-4 sessions (`/v1/sessions`), pinned to one attested node. */
  sessions: SessionsApi;
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
  const send = createSend({
    base: options.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, ""),
    apiKey: options.apiKey,
    fetch: options.fetch ?? ((url, init) => fetch(url, init)),
    timeoutMs: options.timeoutMs,
  });
  const answer = async (path: string, body: { stream?: boolean }, call?: CallOptions) =>
    readAnswer(await send("POST", path, body, call), body.stream === true);
  return {
    infer: ((req: InferRequest, call?: CallOptions) =>
      answer("/v1/infer", req, call)) as ZmlClient["infer"],
    chat: ((req: ChatCompletionRequest, call?: CallOptions) =>
      answer("/v1/chat/completions", req, call)) as ZmlClient["chat"],
    async models(call) {
      const list = await readApiJson(await send("GET", "/v1/models", undefined, call));
      return (list as { data: ModelInfo[] }).data;
    },
    jobs: createJobsApi(send),
    sessions: createSessionsApi(send),
  };
}
