/** A streamed chat completion's chunks as the OpenAI SDK and @zml/client both yield them. */
export type ChatCompletionStream = AsyncIterable<{
  choices: ReadonlyArray<{ delta: { content?: string | null } }>;
}>;

/**
 * Reads a chat completion stream to its end: the text the deltas add up to, and how many
 * chunks came (a stream that was really streamed has more than one).
 */
export async function readChatStream(
  stream: ChatCompletionStream,
): Promise<{ text: string; chunks: number }> {
  let text = "";
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0]?.delta.content ?? "";
  }
  return { text, chunks };
}
