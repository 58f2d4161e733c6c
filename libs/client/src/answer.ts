import { ZmlApiError, ZmlConnectionError } from "./errors.ts";
import { parseRoutingHeader, ROUTING_HEADER } from "./routing.ts";
import type { RoutingInfo } from "./routing.ts";
import { parseSse } from "./sse.ts";
import type { Exchange } from "./transport.ts";
import type {
  AnswerMeta,
  ChatCompletion,
  ChatCompletionChunk,
  InferResponse,
  InferStream,
} from "./types.ts";

/**
 * Reads an inference answer: the completion with its routing, or (for `stream: true`) an
 * {@link InferStream}. An error status becomes {@link ZmlApiError}; so does a success
 * without a readable routing header, which the gateway never sends.
 */
export async function readAnswer(
  ex: Exchange,
  streamed: boolean,
): Promise<InferResponse | InferStream> {
  const meta = await metaOf(ex);
  if (!streamed) {
    const completion = (await readJson(ex)) as ChatCompletion;
    return Object.assign(completion, meta) satisfies InferResponse;
  }
  if (!(ex.res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    discard(ex);
    throw new ZmlApiError({
      status: ex.res.status,
      code: "invalid_response",
      message: "expected an event stream",
      requestId: meta.requestId,
      routing: meta.routing,
    });
  }
  return streamOf(ex, meta);
}

/** Reads a JSON answer of the API (jobs, sessions, models); an error status throws. */
export async function readApiJson(ex: Exchange): Promise<unknown> {
  if (ex.res.status >= 400) throw await errorOf(ex);
  return ex.res.status === 204 ? undefined : readJson(ex);
}

async function metaOf(ex: Exchange): Promise<AnswerMeta> {
  if (ex.res.status >= 400) throw await errorOf(ex);
  return routingMeta(ex);
}

/**
 * The routing header and request id of any answer the gateway relayed (a sealed one's status
 * is the TD's to tell); an answer without a readable routing header is refused.
 */
export function routingMeta(ex: Exchange): AnswerMeta {
  const requestId = ex.res.headers.get("x-request-id") ?? undefined;
  const raw = ex.res.headers.get(ROUTING_HEADER);
  try {
    if (raw === null) throw new Error("missing");
    return { routing: parseRoutingHeader(raw), requestId };
  } catch {
    discard(ex);
    throw new ZmlApiError({
      status: ex.res.status,
      code: "invalid_response",
      message: `answer without a valid ${ROUTING_HEADER} header`,
      requestId,
    });
  }
}

function streamOf(ex: Exchange, meta: AnswerMeta): InferStream {
  const interrupted = (message: string) =>
    new ZmlApiError({
      status: 502,
      code: "stream_interrupted",
      message,
      requestId: meta.requestId,
      routing: meta.routing,
    });
  const chunks = async function* (): AsyncGenerator<ChatCompletionChunk> {
    try {
      for await (const ev of parseSse(bodyChunks(ex))) {
        if (ev.event === "error") throw errorOfEnvelope(ev.data, 502, meta);
        if (ev.data === "[DONE]") return;
        yield JSON.parse(ev.data) as ChatCompletionChunk;
      }
    } catch (err) {
      if (err instanceof ZmlApiError || ex.aborted()) throw err;
      throw interrupted(`stream broke: ${(err as Error).message}`);
    } finally {
      discard(ex);
    }
    throw interrupted("stream ended before [DONE]");
  };
  const iterator = chunks();
  return {
    ...meta,
    abort: () => ex.abort(),
    [Symbol.asyncIterator]: () => iterator,
  };
}

export async function* bodyChunks(ex: Exchange): AsyncGenerator<Uint8Array> {
  if (!ex.res.body) return;
  for await (const chunk of ex.res.body) {
    ex.alive();
    yield chunk;
  }
}

/** The API error an error answer carries (an OpenAI error envelope, or whatever it is). */
export async function errorOf(ex: Exchange): Promise<ZmlApiError> {
  const text = await ex.res.text().catch(() => "");
  ex.done();
  const retry = Number(ex.res.headers.get("retry-after"));
  const raw = ex.res.headers.get(ROUTING_HEADER);
  return errorOfEnvelope(
    text,
    ex.res.status,
    {
      requestId: ex.res.headers.get("x-request-id") ?? undefined,
      routing: raw === null ? undefined : safeRouting(raw),
    },
    Number.isFinite(retry) && retry > 0 ? retry : undefined,
  );
}

/** Builds ZmlApiError from an OpenAI error envelope (or whatever the body is). */
export function errorOfEnvelope(
  text: string,
  status: number,
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
  return new ZmlApiError({
    status,
    code: typeof error.code === "string" ? error.code : `http_${status}`,
    message: typeof error.message === "string" ? error.message : text || `HTTP ${status}`,
    param: typeof error.param === "string" ? error.param : null,
    retryAfterS,
    requestId: meta.requestId,
    routing: meta.routing,
  });
}

function safeRouting(raw: string): RoutingInfo | undefined {
  try {
    return parseRoutingHeader(raw);
  } catch {
    return undefined;
  }
}

/** Drops a body that will not be read. */
export function discard(ex: Exchange): void {
  ex.done();
  if (ex.res.body && !ex.res.bodyUsed) ex.res.body.cancel().catch(() => undefined);
}

async function readJson(ex: Exchange): Promise<unknown> {
  try {
    return JSON.parse(await ex.res.text());
  } catch (err) {
    throw new ZmlConnectionError(`answer body unreadable: ${(err as Error).message}`, err);
  } finally {
    ex.done();
  }
}
