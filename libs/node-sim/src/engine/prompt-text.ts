// The text an engine would tokenize for a request, as a chat template renders it: each
// message's role, then its content, in order. Only prefixes matter to the cache, so the exact
// markers are the simulator's own; what counts is that equal leading messages render to equal
// leading text, and that a role change changes the text.

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A message content: a string, or the text of its parts (other parts render to nothing). */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let text = "";
  for (const part of content) {
    if (isRecord(part) && typeof part["text"] === "string") text += part["text"];
  }
  return text;
}

/** Chat: `messages` (already checked: objects with a string role). */
export function renderChat(messages: readonly unknown[]): string {
  let text = "";
  for (const message of messages) {
    if (!isRecord(message)) continue;
    text += `<|${String(message["role"])}|>\n${contentText(message["content"])}\n`;
  }
  return text;
}

/**
 * Completions: the prompt string, or its strings and token ids in order; a token id renders to
 * four characters, one estimated token, so that ids weigh what the token estimate says.
 */
export function renderCompletion(prompt: unknown): string {
  if (typeof prompt === "string") return prompt;
  if (!Array.isArray(prompt)) return "";
  let text = "";
  const id = (n: unknown): string =>
    typeof n === "number" ? (Math.abs(Math.trunc(n)) % 36 ** 4).toString(36).padStart(4, "0") : "";
  for (const item of prompt) {
    if (typeof item === "string") text += item;
    else if (Array.isArray(item)) for (const n of item) text += id(n);
    else text += id(item);
  }
  return text;
}

/** Responses API: `instructions` as a system message, then the input items as messages. */
export function renderResponses(input: unknown, instructions: unknown): string {
  let text = typeof instructions === "string" ? `<|system|>\n${instructions}\n` : "";
  if (typeof input === "string") return `${text}<|user|>\n${input}\n`;
  if (!Array.isArray(input)) return text;
  for (const item of input) {
    if (!isRecord(item)) continue;
    const kind = typeof item["type"] === "string" ? item["type"] : "item";
    const role = typeof item["role"] === "string" ? item["role"] : kind;
    text += `<|${role}|>\n${contentText(item["content"])}${contentText(item["output"])}\n`;
  }
  return text;
}
