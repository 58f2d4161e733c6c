import type { RoutingInfo } from "@zml/contracts";

/** A chat completion as the node returned it (OpenAI shape; other fields pass through). */
export interface ChatCompletion {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: string; content: string | null; [key: string]: unknown };
    finish_reason: string | null;
    [key: string]: unknown;
  }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  [key: string]: unknown;
}

/** One streamed chunk (OpenAI `chat.completion.chunk`). */
export interface ChatCompletionChunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: string; content?: string | null; [key: string]: unknown };
    finish_reason: string | null;
    [key: string]: unknown;
  }>;
  [key: string]: unknown;
}

/** What every answer carries besides its body. */
export interface AnswerMeta {
  /** The routing decision, parsed from the `x-zml-routing` header. */
  routing: RoutingInfo;
  requestId: string | undefined;
}

/** A non-streamed answer: the completion, with `routing` and `requestId` added. */
export type InferResponse = ChatCompletion & AnswerMeta;

/**
 * A streamed answer. Iterate it for the chunks; the routing decision is known before the
 * first chunk. Iteration throws {@link ZmlApiError} when the stream ends with an error event
 * or without its `[DONE]` marker — a truncated answer never looks complete.
 */
export interface InferStream extends AsyncIterable<ChatCompletionChunk>, AnswerMeta {
  /** Stops the stream; the gateway cancels the node call. */
  abort(): void;
}

/** One model the fleet serves. */
export interface ModelInfo {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
}
