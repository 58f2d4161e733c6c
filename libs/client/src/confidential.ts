// A tier-4 session on the client: its quote verified here before anything is sealed, then
// every request sealed to the session key that quote binds and every answer opened, so the
// gateway between carries only ciphertext (docs/sealed-channel.md).
import { SEALED_REQUEST_MEDIA_TYPE, SEALED_RESPONSE_MEDIA_TYPE } from "@zml/contracts/sealed";
import { SealedChannel, SealedChannelError } from "@zml/seal";
import type { SealedStreamReader } from "@zml/seal";
import { bodyChunks, discard, errorOf, errorOfEnvelope, routingMeta } from "./answer.ts";
import { verifyNodeAttestation } from "./attestation.ts";
import type { AttestationCheckResult, MeasurementSet } from "./attestation.ts";
import { ZmlApiError } from "./errors.ts";
import { parseSse } from "./sse.ts";
import { RawBody } from "./transport.ts";
import type { CallOptions, Exchange, Send } from "./transport.ts";
import type {
  AnswerMeta,
  ChatCompletion,
  ChatCompletionChunk,
  ChatMessage,
  InferResponse,
  InferStream,
  Session,
} from "./types.ts";

/** How `sessions.create` decides whether to trust the session's node. */
export interface SessionTrust {
  /**
   * Measurements you approve. Default: the measurement the gateway's public allowlist
   * (`GET /v1/attestation`) shows for the session's node while it is `attested` — which
   * trusts the gateway's operator to have approved the right code.
   */
  approvedMeasurements?: MeasurementSet[];
  /** The quote's trust anchor; default Intel's SGX root CA. Only tests and dev pass another. */
  trustedRootPem?: string;
  /** The HPKE suite to seal with; default ChaCha20-Poly1305. */
  suite?: "x25519-sha256-chacha20poly1305" | "x25519-sha256-aes128gcm";
}

/** A chat request in a session: the session's model unless given (it must be the same). */
export interface SessionChatRequest {
  model?: string;
  messages: ChatMessage[];
  stream?: boolean;
  [key: string]: unknown;
}

/** A sealed answer, opened: the TD's server's own status, type and bytes. */
export interface OpenedAnswer extends AnswerMeta {
  status: number;
  contentType: string;
  body: Uint8Array;
}

/** A sealed stream, opened: the server's own events (each with its blank line), in order. */
export interface OpenedStream extends AnswerMeta, AsyncIterable<Uint8Array> {
  abort(): void;
}

/** Thrown when the session's node cannot be trusted: nothing was sealed to it. */
export class ZmlAttestationError extends Error {
  readonly code = "attestation_failed";
  readonly checks: AttestationCheckResult["checks"];
  constructor(message: string, checks: AttestationCheckResult["checks"] = []) {
    super(message);
    this.name = "ZmlAttestationError";
    this.checks = checks;
  }
}

/** An open tier-4 session whose node's quote was verified here. */
export interface ConfidentialSession extends Session {
  /** The checks the quote passed here. */
  verification: AttestationCheckResult;
  /** A chat completion, sealed; with `stream: true`, a sealed stream. */
  chat(req: SessionChatRequest & { stream?: false }, call?: CallOptions): Promise<InferResponse>;
  chat(req: SessionChatRequest & { stream: true }, call?: CallOptions): Promise<InferStream>;
  /**
   * Any OpenAI inference call (`/v1/chat/completions`, `/v1/completions`, `/v1/responses`,
   * `/v1/embeddings`) with its body as bytes, sealed; the answer opened, as the server gave it.
   */
  send(path: string, body: Uint8Array, stream: false, call?: CallOptions): Promise<OpenedAnswer>;
  send(path: string, body: Uint8Array, stream: true, call?: CallOptions): Promise<OpenedStream>;
  /** Ends the session (the TD drops its key). */
  close(call?: CallOptions): Promise<void>;
}

interface AllowlistEntry {
  node_id: string;
  status: string;
  measurement: Record<string, string> | null;
}

/** Verifies the session's quote; throws {@link ZmlAttestationError} when it fails. */
export async function verifySession(
  send: Send,
  session: Session,
  nonce: string,
  trust: SessionTrust,
): Promise<AttestationCheckResult> {
  const approved = trust.approvedMeasurements ?? (await allowlisted(send, session.node_id));
  const a = session.attestation;
  const result = verifyNodeAttestation(
    {
      node_id: session.node_id,
      tier: session.tier,
      quote_b64: a.quote_b64,
      nonce_hex: a.nonce_hex,
      tls_key_sha256: a.tls_key_sha256,
    },
    {
      nonce,
      sessionPublicKey: a.session_public_key,
      approvedMeasurements: approved,
      ...(trust.trustedRootPem === undefined ? {} : { trustedRootPem: trust.trustedRootPem }),
    },
  );
  if (!result.ok) {
    throw new ZmlAttestationError(
      `session ${session.session_id} on ${session.node_id} is not trusted: ${result.reason}`,
      result.checks,
    );
  }
  return result;
}

async function allowlisted(send: Send, nodeId: string): Promise<MeasurementSet[]> {
  const ex = await send("GET", "/v1/attestation", undefined, undefined);
  const list = (await ex.res.json().finally(() => ex.done())) as { nodes?: AllowlistEntry[] };
  const entry = list.nodes?.find((n) => n.node_id === nodeId);
  if (entry?.status !== "attested" || !entry.measurement?.["mrtd"]) {
    throw new ZmlAttestationError(`the allowlist does not show ${nodeId} as attested`);
  }
  return [entry.measurement as MeasurementSet];
}

export function confidentialSession(
  send: Send,
  session: Session,
  verification: AttestationCheckResult,
  suite: SessionTrust["suite"],
  remove: (sessionId: string, call?: CallOptions) => Promise<void>,
): ConfidentialSession {
  // One HPKE setup for the whole session; each request gets the channel's next number, which
  // the TD opens once.
  const channel = new SealedChannel({
    sessionId: session.session_id,
    sessionPublicKey: session.attestation.session_public_key,
    ...(suite === undefined ? {} : { suite }),
  });
  const sendSealed = async (
    path: string,
    body: Uint8Array,
    stream: boolean,
    call: CallOptions | undefined,
  ): Promise<OpenedAnswer | OpenedStream> => {
    const sealed = channel.seal({ path, body, model: session.model, stream });
    const ex = await send("POST", path, new RawBody(sealed.bytes, SEALED_REQUEST_MEDIA_TYPE), call);
    const type = (ex.res.headers.get("content-type") ?? "").split(";")[0]!.trim();
    if (type === SEALED_RESPONSE_MEDIA_TYPE) {
      const meta = routingMeta(ex);
      const bytes = new Uint8Array(await ex.res.arrayBuffer().finally(() => ex.done()));
      const opened = opening(meta, () => sealed.opener.openAnswer(bytes));
      return { ...meta, status: opened.status, contentType: opened.contentType, body: opened.body };
    }
    // Anything not sealed is the gateway's (or the TD's) own error, which holds nothing
    // secret; an unsealed success is an answer someone else made.
    if (ex.res.status >= 400) throw await errorOf(ex);
    const meta = routingMeta(ex);
    if (stream && type === "text/event-stream") {
      return openedStream(ex, meta, sealed.opener.streamReader());
    }
    discard(ex);
    throw substituted(meta, "the answer is not sealed");
  };

  const chat = async (req: SessionChatRequest, call?: CallOptions) => {
    const stream = req.stream === true;
    const body = new TextEncoder().encode(
      JSON.stringify({ ...req, model: req.model ?? session.model, stream }),
    );
    if (stream) {
      return chunksOf((await sendSealed("/v1/chat/completions", body, true, call)) as OpenedStream);
    }
    const answer = (await sendSealed("/v1/chat/completions", body, false, call)) as OpenedAnswer;
    const text = new TextDecoder().decode(answer.body);
    if (answer.status >= 400) throw errorOfEnvelope(text, answer.status, answer);
    const meta = { routing: answer.routing, requestId: answer.requestId };
    return Object.assign(JSON.parse(text) as ChatCompletion, meta) satisfies InferResponse;
  };

  return {
    ...session,
    verification,
    chat: chat as ConfidentialSession["chat"],
    send: sendSealed as ConfidentialSession["send"],
    close: (call) => remove(session.session_id, call),
  };
}

function substituted(meta: AnswerMeta, message: string): ZmlApiError {
  return new ZmlApiError({
    status: 502,
    code: "sealed_response_invalid",
    message: `${message}: it did not come from the session's TD`,
    requestId: meta.requestId,
    routing: meta.routing,
  });
}

/** Opens with `open`; what does not open is refused as not the TD's answer. */
function opening<T>(meta: AnswerMeta, open: () => T): T {
  try {
    return open();
  } catch (error) {
    if (error instanceof SealedChannelError) throw substituted(meta, error.message);
    throw error;
  }
}

/** The stream's events, opened one by one; it ends only at the final chunk. */
function openedStream(ex: Exchange, meta: AnswerMeta, reader: SealedStreamReader): OpenedStream {
  const events = async function* (): AsyncGenerator<Uint8Array> {
    try {
      for await (const bytes of bodyChunks(ex)) {
        for (const part of opening(meta, () => reader.push(bytes))) {
          // The gateway's own error event (the stream broke on the way): in clear, as it
          // holds nothing of the answer.
          if (part.kind === "gateway_error") throw errorOfEnvelope(part.data, 502, meta);
          if (part.kind === "head" && part.head.status !== 200) {
            throw substituted(meta, `the stream's head says ${part.head.status}`);
          }
          if (part.kind === "event") yield part.event;
        }
      }
      opening(meta, () => reader.finish());
    } finally {
      discard(ex);
    }
  };
  const iterator = events();
  return { ...meta, abort: () => ex.abort(), [Symbol.asyncIterator]: () => iterator };
}

/** Chat chunks from the opened events (the server's own SSE). */
function chunksOf(opened: OpenedStream): InferStream {
  const chunks = async function* (): AsyncGenerator<ChatCompletionChunk> {
    for await (const ev of parseSse(opened)) {
      if (ev.data === "[DONE]") return;
      yield JSON.parse(ev.data) as ChatCompletionChunk;
    }
  };
  const iterator = chunks();
  return {
    routing: opened.routing,
    requestId: opened.requestId,
    abort: () => opened.abort(),
    [Symbol.asyncIterator]: () => iterator,
  };
}
