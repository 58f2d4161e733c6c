import { createHash } from "node:crypto";

/** Tokens per KV-cache block, vLLM's default `block_size`. */
export const BLOCK_TOKENS = 16;
/** The simulator's token estimate: 4 characters per token (README, "Served API"). */
export const CHARS_PER_TOKEN = 4;

/** A prompt as the engine sees it: its size in tokens and the hashes of its full blocks. */
export interface PromptBlocks {
  tokens: number;
  /**
   * One hash per full block of {@link BLOCK_TOKENS} tokens, in order; each covers the block
   * and every block before it (a chain), so equal hashes mean equal prefixes.
   */
  hashes: string[];
}

/**
 * Cuts `text` (a rendered prompt) into blocks of `BLOCK_TOKENS × CHARS_PER_TOKEN` characters
 * and hashes each full block with the hash of the block before it. A trailing partial block
 * is counted in `tokens` and never cached, as in vLLM.
 */
export function promptBlocks(text: string): PromptBlocks {
  const tokens = Math.max(1, Math.ceil(text.length / CHARS_PER_TOKEN));
  const blockChars = BLOCK_TOKENS * CHARS_PER_TOKEN;
  const full = Math.floor(text.length / blockChars);
  const hashes: string[] = [];
  let previous = "";
  for (let i = 0; i < full; i++) {
    previous = createHash("sha256")
      .update(previous)
      .update(text.slice(i * blockChars, (i + 1) * blockChars))
      .digest("base64url")
      .slice(0, 22);
    hashes.push(previous);
  }
  return { tokens, hashes };
}
