/*
 * Block digests of a prompt's prefix, for cache-aware routing (README, "Prefix affinity").
 *
 * Engines cache the KV of a prompt in blocks, each keyed by the whole prefix up to it, and skip
 * the prefill of the blocks they still hold. The gateway cannot tokenise, so it cuts the
 * prompt's text into blocks of PREFIX_BLOCK_CHARS characters instead and gives each block a
 * digest of everything before and in it: two prompts that share their first k blocks of text
 * share their first k digests, and so (roughly) their first k × 64 tokens of KV.
 *
 * The text is the parsed body walked in order, keys and values alike, so roles, message
 * boundaries and content parts all count and nothing is serialised again. The digests are
 * 48-bit numbers from two independent 32-bit multiply-xor lanes: not cryptographic (they only
 * steer an estimate, and travel only among dispatchers, which see the body anyway), never
 * logged, and cheap enough to run once per request at intake.
 */

/** Characters per block: about 64 tokens at the 4 characters per token the estimates use. */
export const PREFIX_BLOCK_CHARS = 256;
/** Blocks digested at most: 64 KiB characters (about 16k tokens) of prefix. */
export const PREFIX_MAX_BLOCKS = 256;
/** Characters per token the estimates assume (as the simulated node does). */
export const CHARS_PER_TOKEN = 4;

/** A prompt's size and the digests of its whole blocks, in order. */
export interface PromptPrefix {
  /** Characters of the walked prompt text (not capped). */
  readonly chars: number;
  /** One digest per whole block, at most {@link PREFIX_MAX_BLOCKS}; an integer < 2^48. */
  readonly digests: Float64Array;
}

const TWO_POW_16 = 65_536;
/** Separators fed between parts, so that `["ab","c"]` and `["a","bc"]` differ. */
const KEY_END = 0x1f;
const VALUE_END = 0x1e;

/** Streams characters into two hash lanes and takes a digest at every block boundary. */
class BlockHasher {
  private a = 0x811c9dc5;
  private b = 0x9747b28c;
  private inBlock = 0;
  chars = 0;
  count = 0;
  readonly digests = new Float64Array(PREFIX_MAX_BLOCKS);

  get full(): boolean {
    return this.count === PREFIX_MAX_BLOCKS;
  }

  feed(text: string): void {
    const n = text.length;
    this.chars += n;
    if (this.full) return;
    let a = this.a;
    let b = this.b;
    let inBlock = this.inBlock;
    for (let k = 0; k < n; k++) {
      const c = text.charCodeAt(k);
      // FNV-1a, and a multiplicative hash with another constant: two multiplies a character.
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b + c, 0x9e3779b1);
      if (++inBlock === PREFIX_BLOCK_CHARS) {
        inBlock = 0;
        this.digests[this.count++] = digestOf(a, b);
        if (this.full) break;
      }
    }
    this.a = a;
    this.b = b;
    this.inBlock = inBlock;
  }

  mark(code: number): void {
    this.feed(String.fromCharCode(code));
  }

  result(): PromptPrefix {
    return { chars: this.chars, digests: this.digests.slice(0, this.count) };
  }
}

/** Finalises both lanes (murmur3's mix) and packs 32 + 16 bits into a safe integer. */
function digestOf(a: number, b: number): number {
  return (fmix(a) >>> 0) * TWO_POW_16 + (fmix(b ^ 0x27d4eb2f) >>> 16);
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/** Walks a parsed JSON value in document order; stops once every block is taken. */
function walk(hasher: BlockHasher, value: unknown): void {
  if (typeof value === "string") {
    hasher.feed(value);
  } else if (typeof value === "number" || typeof value === "boolean") {
    hasher.feed(String(value));
  } else if (Array.isArray(value)) {
    for (const item of value) {
      walk(hasher, item);
      hasher.mark(VALUE_END);
    }
  } else if (value !== null && typeof value === "object") {
    for (const key in value) {
      hasher.feed(key);
      hasher.mark(KEY_END);
      walk(hasher, (value as Record<string, unknown>)[key]);
      hasher.mark(VALUE_END);
    }
  }
}

/**
 * The prefix of the parts of a request body that make its prompt, in the order the engine
 * sees them: chat `messages`; `/v1/completions` `prompt`; `/v1/responses` `instructions`, then
 * `input`. Pass them in that order. Returns `undefined` for a prompt without one whole block,
 * which no engine would cache usefully anyway.
 */
export function promptPrefixOf(...parts: readonly unknown[]): PromptPrefix | undefined {
  const hasher = new BlockHasher();
  for (const part of parts) {
    if (part === undefined) continue;
    walk(hasher, part);
    hasher.mark(VALUE_END);
  }
  return hasher.count === 0 ? undefined : hasher.result();
}

/** Tokens the estimates count for `chars` characters of prompt. */
export function tokensOfChars(chars: number): number {
  return chars / CHARS_PER_TOKEN;
}

/** Bytes per digest on the wire (`writeUIntBE` takes at most 6). */
const DIGEST_BYTES = 6;

/**
 * The header form of a prefix: `<chars>:<digests>`, the digests as 6 big-endian bytes each,
 * base64url. A 64-block prompt takes about 520 characters.
 */
export function encodePromptPrefix(prefix: PromptPrefix): string {
  const bytes = Buffer.allocUnsafe(prefix.digests.length * DIGEST_BYTES);
  for (let i = 0; i < prefix.digests.length; i++) {
    bytes.writeUIntBE(prefix.digests[i]!, i * DIGEST_BYTES, DIGEST_BYTES);
  }
  return `${prefix.chars}:${bytes.toString("base64url")}`;
}

/**
 * Reads {@link encodePromptPrefix}'s form; `undefined` for anything else (a header that does
 * not parse carries no prefix rather than failing the request: it only steers an estimate).
 */
export function decodePromptPrefix(text: string): PromptPrefix | undefined {
  const colon = text.indexOf(":");
  if (colon <= 0 || colon > 12) return undefined;
  const chars = Number(text.slice(0, colon));
  if (!Number.isSafeInteger(chars) || chars < 0) return undefined;
  const encoded = text.slice(colon + 1);
  // Six bytes are eight base64 characters: any other length is not a list of digests.
  if (encoded.length % 8 !== 0 || !/^[A-Za-z0-9_-]+$/.test(encoded)) return undefined;
  const bytes = Buffer.from(encoded, "base64url");
  const count = bytes.length / DIGEST_BYTES;
  if (!Number.isInteger(count) || count < 1 || count > PREFIX_MAX_BLOCKS) return undefined;
  if (chars < count * PREFIX_BLOCK_CHARS) return undefined;
  const digests = new Float64Array(count);
  for (let i = 0; i < count; i++) digests[i] = bytes.readUIntBE(i * DIGEST_BYTES, DIGEST_BYTES);
  return { chars, digests };
}
