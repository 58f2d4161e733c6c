import { randomUUID } from "node:crypto";
import type { InferenceRequest } from "./openai-request.ts";
import { createLlamacppChatRender } from "./llamacpp-render.ts";
import { createResponsesRender } from "./responses-render.ts";
import type { ResponseRender, SimFlavour } from "./types.ts";

/**
 * The words a node's answers are made of, one per token, space-separated, repeated as long
 * as the answer runs. Their JSON forms are computed once.
 */
export interface Vocabulary {
  /** Text of token `index` (0-based). */
  text(index: number): string;
  /** The same as a JSON string. */
  json(index: number): string;
}

export function createVocabulary(words: readonly string[]): Vocabulary {
  const first = words.map((word) => JSON.stringify(word));
  const next = words.map((word) => JSON.stringify(` ${word}`));
  return {
    text: (index) => {
      const word = words[index % words.length] ?? "";
      return index === 0 ? word : ` ${word}`;
    },
    json: (index) => (index === 0 ? first : next)[index % words.length] ?? '""',
  };
}

/** Plain ASCII words: tests can compare every byte of an answer. */
export const DEFAULT_VOCABULARY = createVocabulary(
  (
    "The simulated node streams deterministic tokens so tests can compare every byte of " +
    "the answer it gives back to the gateway under load"
  ).split(" "),
);

/** The whole generated text for `count` tokens. */
function generatedText(count: number, vocabulary: Vocabulary): string {
  let text = "";
  for (let i = 0; i < count; i++) text += vocabulary.text(i);
  return text;
}

/** The fingerprint TGI puts in every response: its version and backend. */
const TGI_FINGERPRINT = "3.3.6-native";

/** The terminator every OpenAI-compatible stream ends with. */
const SSE_DONE = "data: [DONE]\n\n";

/** A `data:` event that is not JSON, for the `malformed_chunk` fault. */
export const SSE_MALFORMED = "data: {not json\n\n";

/**
 * Renders the response to `request` with `tokens` tokens. vLLM sends a role-only first chunk
 * and random ids; TGI repeats the role in every delta, has an empty id, a system fingerprint
 * and `"usage":null` on every chunk.
 */
export function createResponseRender(
  flavour: SimFlavour,
  request: InferenceRequest,
  tokens: number,
  finishReason: "stop" | "length",
  createdS: number,
  vocabulary: Vocabulary,
): ResponseRender {
  if (request.kind === "responses") {
    return createResponsesRender(
      request,
      Array.from({ length: tokens }, (_, i) => vocabulary.text(i)),
      finishReason,
      createdS,
    );
  }
  if (flavour === "llamacpp" && request.kind === "chat") {
    return createLlamacppChatRender(request, tokens, finishReason, createdS, vocabulary);
  }
  const tgi = flavour === "tgi";
  const chat = request.kind === "chat";
  const id = tgi ? "" : `${chat ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`;
  const model = JSON.stringify(request.model);
  const usage = {
    prompt_tokens: request.promptTokens,
    total_tokens: request.promptTokens + tokens,
    completion_tokens: tokens,
  };
  const usageJson = JSON.stringify(usage);
  const roleChunk = chat && !tgi;
  const usageChunk = request.stream && request.includeUsage;
  const eventCount = (roleChunk ? 1 : 0) + tokens + (usageChunk ? 1 : 0);

  const object = chat ? "chat.completion.chunk" : "text_completion";
  const head = tgi
    ? `data: {"object":"${object}","id":"","created":${createdS},"model":${model},"system_fingerprint":"${TGI_FINGERPRINT}","choices":[`
    : `data: {"id":"${id}","object":"${object}","created":${createdS},"model":${model},"choices":[`;
  const tail = tgi ? `],"usage":null}\n\n` : `]}\n\n`;
  const open = chat
    ? `{"index":0,"delta":{${tgi ? `"role":"assistant",` : ""}"content":`
    : `{"index":0,"text":`;
  const close = chat ? `},"logprobs":null,"finish_reason":` : `,"logprobs":null,"finish_reason":`;
  const stopReason = tgi ? "" : `,"stop_reason":null`;

  function tokenEvent(index: number): string {
    const last = index === tokens - 1;
    const reason = last ? `"${finishReason}"${stopReason}` : "null";
    return `${head}${open}${vocabulary.json(index)}${close}${reason}}${tail}`;
  }

  function usageEvent(): string {
    const prefix = tgi
      ? `data: {"object":"${object}","id":"","created":${createdS},"model":${model},"system_fingerprint":"${TGI_FINGERPRINT}"`
      : `data: {"id":"${id}","object":"${object}","created":${createdS},"model":${model}`;
    return `${prefix},"choices":[],"usage":${usageJson}}\n\n`;
  }

  const firstToken = roleChunk ? 1 : 0;
  return {
    eventCount,
    terminator: SSE_DONE,
    firstTokenEvent: firstToken,
    tokenOfEvent(i) {
      return Math.min(Math.max(i - firstToken, 0), tokens - 1);
    },
    event(i) {
      if (roleChunk && i === 0) {
        return `${head}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}${tail}`;
      }
      const index = i - firstToken;
      return index < tokens ? tokenEvent(index) : usageEvent();
    },
    body() {
      const text = generatedText(tokens, vocabulary);
      const created = createdS;
      const fingerprint = tgi ? { system_fingerprint: TGI_FINGERPRINT } : {};
      const choice = chat
        ? {
            index: 0,
            message: tgi
              ? { role: "assistant", content: text }
              : { role: "assistant", content: text, tool_calls: [] },
            logprobs: null,
            finish_reason: finishReason,
            ...(tgi ? {} : { stop_reason: null }),
          }
        : {
            index: 0,
            text,
            logprobs: null,
            finish_reason: finishReason,
            ...(tgi ? {} : { stop_reason: null }),
          };
      return JSON.stringify({
        id,
        object: chat ? "chat.completion" : "text_completion",
        created,
        model: request.model,
        ...fingerprint,
        choices: [choice],
        usage,
      });
    },
  };
}
