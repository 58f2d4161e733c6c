import type { ErrorBody } from "@zml/contracts";
import { toOpenAiError } from "@zml/contracts";

/**
 * The SSE event that ends a stream which broke after its first byte. It carries an OpenAI
 * error object and is never followed by `[DONE]`, so clients (including the official SDKs)
 * raise an error instead of taking a truncated answer for a complete one.
 */
export function sseErrorEvent(body: ErrorBody): string {
  return `event: error\ndata: ${JSON.stringify(toOpenAiError(body))}\n\n`;
}
