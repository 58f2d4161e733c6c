import { randomUUID } from "node:crypto";
import type { InferenceRequest } from "./openai-request.ts";
import type { ResponseRender } from "./types.ts";

/** Events a Responses stream sends before its first text delta. */
const LEAD_EVENTS = 4;
/** Events after the last delta: text done, part done, item done, completed. */
const TRAIL_EVENTS = 4;

/**
 * Renders a Responses API answer (`POST /v1/responses`) as vLLM serves it: one assistant
 * message with one `output_text` part. Streamed, it is the API's typed events, each
 * `event: <type>` plus its JSON with a `sequence_number` from 0, from `response.created`
 * to `response.completed` (`response.incomplete` when `max_output_tokens` cut it short);
 * there is no `[DONE]`.
 */
export function createResponsesRender(
  request: InferenceRequest,
  tokenTexts: readonly string[],
  finishReason: "stop" | "length",
  createdS: number,
): ResponseRender {
  const tokens = tokenTexts.length;
  const id = `resp_${randomUUID().replaceAll("-", "")}`;
  const itemId = `msg_${randomUUID().replaceAll("-", "")}`;
  const text = tokenTexts.join("");
  const incomplete = finishReason === "length";
  const usage = {
    input_tokens: request.promptTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: request.promptTokens + tokens,
  };
  const part = (t: string) => ({ type: "output_text", text: t, annotations: [], logprobs: [] });
  const item = (done: boolean) => ({
    id: itemId,
    type: "message",
    role: "assistant",
    status: done ? (incomplete ? "incomplete" : "completed") : "in_progress",
    content: done ? [part(text)] : [],
  });
  const response = (final: boolean) => ({
    id,
    object: "response",
    created_at: createdS,
    status: final ? (incomplete ? "incomplete" : "completed") : "in_progress",
    model: request.model,
    output: final ? [item(true)] : [],
    usage: final ? usage : null,
    error: null,
    incomplete_details: final && incomplete ? { reason: "max_output_tokens" } : null,
    instructions: null,
    max_output_tokens: request.maxTokens ?? null,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: null,
    temperature: 1,
    top_p: 1,
    tool_choice: "auto",
    tools: [],
    text: { format: { type: "text" } },
    truncation: "disabled",
    metadata: {},
  });
  const at = { item_id: itemId, output_index: 0, content_index: 0 };
  const sse = (seq: number, type: string, fields: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq, ...fields })}\n\n`;

  const eventCount = LEAD_EVENTS + tokens + TRAIL_EVENTS;
  return {
    eventCount,
    firstTokenEvent: LEAD_EVENTS,
    terminator: "",
    tokenOfEvent(i) {
      return Math.min(Math.max(i - LEAD_EVENTS, 0), tokens - 1);
    },
    event(i) {
      if (i === 0) return sse(i, "response.created", { response: response(false) });
      if (i === 1) return sse(i, "response.in_progress", { response: response(false) });
      if (i === 2) {
        return sse(i, "response.output_item.added", { output_index: 0, item: item(false) });
      }
      if (i === 3) {
        return sse(i, "response.content_part.added", { ...at, part: part("") });
      }
      const token = i - LEAD_EVENTS;
      if (token < tokens) {
        return sse(i, "response.output_text.delta", {
          ...at,
          delta: tokenTexts[token],
          logprobs: [],
        });
      }
      switch (token - tokens) {
        case 0:
          return sse(i, "response.output_text.done", { ...at, text, logprobs: [] });
        case 1:
          return sse(i, "response.content_part.done", { ...at, part: part(text) });
        case 2:
          return sse(i, "response.output_item.done", { output_index: 0, item: item(true) });
        default:
          return sse(i, incomplete ? "response.incomplete" : "response.completed", {
            response: response(true),
          });
      }
    },
    body() {
      return JSON.stringify(response(true));
    },
  };
}
