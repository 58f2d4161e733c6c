import { randomBytes } from "node:crypto";
import type { InferenceRequest } from "./openai-request.ts";
import type { ResponseRender } from "./types.ts";

/** What llama-server (build b1-80fb11a, the one the e2e tests run) puts in every answer. */
export const LLAMACPP_FINGERPRINT = "b1-80fb11a";

/** The node's words (openai-response's `Vocabulary`), by token index. */
interface Words {
  text(index: number): string;
  json(index: number): string;
}

const ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** llama-server's completion ids: a prefix and 32 random letters and digits. */
function completionId(prefix: string): string {
  const bytes = randomBytes(32);
  let id = `${prefix}-`;
  for (const byte of bytes) id += ID_ALPHABET[byte % ID_ALPHABET.length];
  return id;
}

/**
 * A chat completion as llama.cpp's `llama-server` writes it: keys in its order (`choices`
 * first), a `system_fingerprint`, `usage` with `prompt_tokens_details.cached_tokens`; a stream
 * opens with a role event (`"content":null`), sends one event per token, then a separate
 * event with the finish reason and an empty delta, then (with `include_usage`) the usage
 * event with `"choices":[]`. The real server adds a `timings` object beside `usage`; the
 * simulator leaves it out, as it has no prompt cache or timings to report.
 */
export function createLlamacppChatRender(
  request: InferenceRequest,
  tokens: number,
  finishReason: "stop" | "length",
  createdS: number,
  vocabulary: Words,
): ResponseRender {
  const id = completionId("chatcmpl");
  const model = JSON.stringify(request.model);
  const usage =
    `{"completion_tokens":${tokens},"prompt_tokens":${request.promptTokens},` +
    `"total_tokens":${request.promptTokens + tokens},"prompt_tokens_details":{"cached_tokens":0}}`;
  const tail = `],"created":${createdS},"id":"${id}","model":${model},"system_fingerprint":"${LLAMACPP_FINGERPRINT}","object":"chat.completion.chunk"`;
  const event = (choice: string) => `data: {"choices":[${choice}${tail}}\n\n`;
  const usageEvent = request.stream && request.includeUsage;
  // role, tokens, finish, usage
  const eventCount = 1 + tokens + 1 + (usageEvent ? 1 : 0);
  return {
    eventCount,
    terminator: "data: [DONE]\n\n",
    firstTokenEvent: 1,
    tokenOfEvent(i) {
      return Math.min(Math.max(i - 1, 0), Math.max(tokens - 1, 0));
    },
    event(i) {
      if (i === 0) {
        return event(
          `{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}`,
        );
      }
      if (i <= tokens) {
        return event(
          `{"finish_reason":null,"index":0,"delta":{"content":${vocabulary.json(i - 1)}}}`,
        );
      }
      if (i === tokens + 1)
        return event(`{"finish_reason":"${finishReason}","index":0,"delta":{}}`);
      return `data: {"choices":[${tail},"usage":${usage}}\n\n`;
    },
    body() {
      let text = "";
      for (let i = 0; i < tokens; i++) text += vocabulary.text(i);
      return (
        `{"choices":[{"finish_reason":"${finishReason}","index":0,"message":{"role":"assistant","content":${JSON.stringify(text)}}}],` +
        `"created":${createdS},"model":${model},"system_fingerprint":"${LLAMACPP_FINGERPRINT}",` +
        `"object":"chat.completion","usage":${usage},"id":"${id}"}`
      );
    },
  };
}
