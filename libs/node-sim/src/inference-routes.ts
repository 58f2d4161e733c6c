import type { IncomingMessage, ServerResponse } from "node:http";
import { embeddingsBody, parseEmbeddingRequest } from "./embeddings.ts";
import type { FaultSlot } from "./fault-slot.ts";
import { asGenerationFault, runGeneration } from "./generation.ts";
import type { GenerationContext } from "./generation.ts";
import { isHttp2, sendJson } from "./http-reply.ts";
import { errorBodyJson, parseInferenceRequest } from "./openai-request.ts";
import { readBody } from "./read-body.ts";
import { answerRequestFault } from "./request-faults.ts";
import type { RequestLedger } from "./request-ledger.ts";

/** Inference bodies above this size are answered with 413, as a real node's proxy would. */
export const SIM_BODY_LIMIT_BYTES = 8 * 1024 * 1024;

/** The OpenAI-compatible inference paths and what each one runs. */
export const INFERENCE_KINDS = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completion",
  "/v1/responses": "responses",
  "/v1/embeddings": "embeddings",
} as const;
export type InferencePath = keyof typeof INFERENCE_KINDS;

/** What the inference routes share with the rest of the node. */
export interface InferenceDeps {
  nodeId: string;
  models: ReadonlySet<string>;
  faults: FaultSlot;
  ledger: RequestLedger;
  /** Slots, pacing and metrics, shared by every generation. */
  generation: GenerationContext;
  /** The TLS key the connection of `req` was opened with (TLS nodes). */
  tlsKeyOf(req: IncomingMessage): string | undefined;
}

/**
 * `POST` on an inference path: reads and counts the payload, applies a request-stage fault,
 * then answers as vLLM or TGI would (validation errors, generation, embeddings).
 */
export function createInferenceRoute(
  deps: InferenceDeps,
): (req: IncomingMessage, res: ServerResponse, path: InferencePath) => Promise<void> {
  const { faults, generation, ledger, models } = deps;

  /** Embeddings take a slot like a generation and answer after time-to-first-token. */
  function answerEmbeddings(res: ServerResponse, raw: Buffer): void {
    const parsed = parseEmbeddingRequest(raw, models);
    if (!("inputs" in parsed)) {
      sendJson(res, parsed.status, errorBodyJson(parsed));
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const lease = generation.gate.enter(() => {
      timer = setTimeout(() => {
        if (res.destroyed || generation.closing) return;
        sendJson(res, 200, embeddingsBody(parsed));
        ledger.completed();
      }, generation.config.ttftMs);
    });
    res.once("close", () => {
      clearTimeout(timer);
      lease.release();
    });
  }

  return async function handleInference(req, res, path) {
    const read = await readBody(req, SIM_BODY_LIMIT_BYTES);
    if (!read.ok) {
      if (read.reason === "too_large") {
        const message = `request body exceeds ${SIM_BODY_LIMIT_BYTES} bytes`;
        // HTTP/2 has no connection header: the stream ends, the session goes on.
        const close: Record<string, string> = isHttp2(req) ? {} : { connection: "close" };
        sendJson(res, 413, errorBodyJson({ status: 413, message, param: null }), close);
      }
      return;
    }
    ledger.received(req, res, path, read.body, deps.tlsKeyOf(req));

    const fault = faults.take("request");
    if (fault !== null) {
      answerRequestFault(req, res, fault, deps.nodeId);
      return;
    }
    const kind = INFERENCE_KINDS[path];
    if (kind === "embeddings") return answerEmbeddings(res, read.body);
    const parsed = parseInferenceRequest(kind, read.body, models, generation.engine !== undefined);
    if (!("kind" in parsed)) {
      sendJson(res, parsed.status, errorBodyJson(parsed));
      return;
    }
    runGeneration(generation, res, parsed, asGenerationFault(faults.take("generation")));
  };
}
