import type { ErrorBody, NodeApi } from "@zml/contracts";
import { toOpenAiError } from "@zml/contracts";

/**
 * The SSE event that ends a stream which broke after its first byte. It carries an OpenAI
 * error object and is never followed by `[DONE]` (nor, for the Responses API, by
 * `response.completed`), so clients (including the official SDKs) raise an error instead of
 * taking a truncated answer for a complete one. A Responses stream gets the API's typed
 * `error` event, numbered after the events relayed before it.
 */
export function sseErrorEvent(body: ErrorBody, api: NodeApi, sequenceNumber: number): string {
  const error = toOpenAiError(body);
  const data =
    api === "responses" ? { type: "error", sequence_number: sequenceNumber, ...error } : error;
  return `event: error\ndata: ${JSON.stringify(data)}\n\n`;
}
