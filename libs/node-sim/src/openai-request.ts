import { STATUS_CODES } from "node:http";
import { renderChat, renderCompletion, renderResponses } from "./engine/prompt-text.ts";

/** The OpenAI-compatible generating endpoints the node serves (embeddings: `embeddings.ts`). */
export type InferenceKind = "chat" | "completion" | "responses";

/** What the node needs from an inference body; everything else is ignored, as vLLM does. */
export interface InferenceRequest {
  kind: InferenceKind;
  model: string;
  stream: boolean;
  includeUsage: boolean;
  /** `max_completion_tokens` (chat), `max_output_tokens` (responses) or `max_tokens`. */
  maxTokens: number | undefined;
  /** Rough prompt size: 4 characters per token, token ids counted one each. */
  promptTokens: number;
  /**
   * The prompt as an engine would tokenize it (roles and contents in order), asked for by
   * nodes with an engine model; `promptTokens` is then this text's estimate.
   */
  promptText?: string;
}

/** An error answered with the OpenAI envelope `{error:{message,type,param,code}}`. */
export interface ApiError {
  status: number;
  message: string;
  param: string | null;
}

/** vLLM names the error type after the HTTP status: 404 → `NotFoundError`. */
function errorType(status: number): string {
  const phrase = (STATUS_CODES[status] ?? "Unknown").replace(/[^A-Za-z]/g, "");
  return phrase.endsWith("Error") ? phrase : `${phrase}Error`;
}

/** The JSON text of an OpenAI-style error body, as vLLM sends it. */
export function errorBodyJson(error: ApiError): string {
  return JSON.stringify({
    error: {
      message: error.message,
      type: errorType(error.status),
      param: error.param,
      code: error.status,
    },
  });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function bad(message: string, param: string | null): ApiError {
  return { status: 400, message, param };
}

function textLength(content: unknown): number {
  if (typeof content === "string") return content.length;
  if (!Array.isArray(content)) return 0;
  let length = 0;
  for (const part of content) {
    if (isRecord(part) && typeof part["text"] === "string") length += part["text"].length;
  }
  return length;
}

function estimateTokens(characters: number, tokenIds: number): number {
  return Math.max(1, Math.ceil(characters / 4) + tokenIds);
}

function chatPromptTokens(messages: unknown[]): number | ApiError {
  let characters = 0;
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i];
    if (!isRecord(message) || typeof message["role"] !== "string") {
      return bad(`messages[${i}]: expected an object with a string role`, `messages.${i}`);
    }
    characters += textLength(message["content"]);
  }
  return estimateTokens(characters, 0);
}

/** Responses API `input`: a string, or items (messages with text content, tool outputs, …). */
function responsesPromptTokens(input: unknown, instructions: unknown): number | ApiError {
  if (instructions !== undefined && instructions !== null && typeof instructions !== "string") {
    return bad("instructions: expected a string", "instructions");
  }
  const extra = typeof instructions === "string" ? instructions.length : 0;
  if (typeof input === "string") return estimateTokens(input.length + extra, 0);
  if (!Array.isArray(input) || input.length === 0) {
    return bad("input: expected a string or a non-empty array of items", "input");
  }
  let characters = extra;
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (!isRecord(item)) return bad(`input[${i}]: expected an object`, `input.${i}`);
    characters += textLength(item["content"]) + textLength(item["output"]);
  }
  return estimateTokens(characters, 0);
}

function completionPromptTokens(prompt: unknown): number | ApiError {
  if (typeof prompt === "string") return estimateTokens(prompt.length, 0);
  if (Array.isArray(prompt) && prompt.length > 0) {
    let characters = 0;
    let tokenIds = 0;
    for (const item of prompt) {
      if (typeof item === "string") characters += item.length;
      else if (typeof item === "number") tokenIds += 1;
      else if (Array.isArray(item)) tokenIds += item.length;
      else return bad("prompt: expected a string, strings or token ids", "prompt");
    }
    return estimateTokens(characters, tokenIds);
  }
  return bad("prompt: expected a string, strings or token ids", "prompt");
}

function readMaxTokens(body: Record<string, unknown>, key: string): number | undefined | ApiError {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value === "number" && Number.isInteger(value) && value >= 1) return value;
  return bad(`${key}: expected an integer of at least 1`, key);
}

/** A body as JSON object with its `model`, or the 400 vLLM answers when it is not one. */
export function parseModelBody(
  raw: Buffer,
): { body: Record<string, unknown>; model: string } | ApiError {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch (error) {
    return bad(`JSON decode error: ${(error as Error).message}`, null);
  }
  if (!isRecord(body)) return bad("the request body must be a JSON object", null);
  const model = body["model"];
  if (typeof model !== "string" || model.length === 0) {
    return bad("model: expected a non-empty string", "model");
  }
  return { body, model };
}

/**
 * Parses and checks an inference body the way vLLM answers it: 400 for bad JSON or a bad
 * field, 404 for a model the node does not serve.
 */
export function parseInferenceRequest(
  kind: InferenceKind,
  raw: Buffer,
  models: ReadonlySet<string>,
  renderPrompt = false,
): InferenceRequest | ApiError {
  const parsed = parseModelBody(raw);
  if ("status" in parsed) return parsed;
  const { body, model } = parsed;

  let promptTokens: number | ApiError;
  if (kind === "chat") {
    const messages = body["messages"];
    if (!Array.isArray(messages) || messages.length === 0) {
      return bad("messages: expected a non-empty array", "messages");
    }
    promptTokens = chatPromptTokens(messages);
  } else if (kind === "responses") {
    promptTokens = responsesPromptTokens(body["input"], body["instructions"]);
  } else {
    promptTokens = completionPromptTokens(body["prompt"]);
  }
  if (typeof promptTokens !== "number") return promptTokens;

  const stream = body["stream"];
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    return bad("stream: expected a boolean", "stream");
  }
  const options = body["stream_options"];
  let includeUsage = false;
  if (options !== undefined && options !== null) {
    if (!isRecord(options)) return bad("stream_options: expected an object", "stream_options");
    const flag = options["include_usage"];
    if (flag !== undefined && flag !== null && typeof flag !== "boolean") {
      return bad(
        "stream_options.include_usage: expected a boolean",
        "stream_options.include_usage",
      );
    }
    includeUsage = flag === true;
  }

  const maxCompletion =
    kind === "chat"
      ? readMaxTokens(body, "max_completion_tokens")
      : kind === "responses"
        ? readMaxTokens(body, "max_output_tokens")
        : undefined;
  if (typeof maxCompletion === "object") return maxCompletion;
  const maxTokens = readMaxTokens(body, "max_tokens");
  if (typeof maxTokens === "object") return maxTokens;

  if (!models.has(model)) {
    return { status: 404, message: `The model \`${model}\` does not exist.`, param: "model" };
  }

  const request: InferenceRequest = {
    kind,
    model,
    stream: stream === true,
    includeUsage,
    maxTokens: maxCompletion ?? maxTokens,
    promptTokens,
  };
  if (renderPrompt) {
    const text =
      kind === "chat"
        ? renderChat(body["messages"] as unknown[])
        : kind === "responses"
          ? renderResponses(body["input"], body["instructions"])
          : renderCompletion(body["prompt"]);
    request.promptText = text;
    request.promptTokens = estimateTokens(text.length, 0);
  }
  return request;
}
