import { writeGguf } from "./gguf-writer.ts";
import type { GgufTensor, GgufValue } from "./gguf-writer.ts";

/** The shape of the generated model: small enough to load in milliseconds on one thread. */
export interface TinyLlamaOptions {
  /** Seed of the weights; the same seed writes the same bytes. Default 1. */
  readonly seed?: number;
  /** Context length the model declares it was trained for. Default 4096. */
  readonly contextLength?: number;
  /** Name llama-server reports for it. Default `zml-tiny-llama`. */
  readonly name?: string;
}

/** The model's dimensions (a 2-layer llama with 4 heads of 16). */
export const TINY_LLAMA = {
  layers: 2,
  embedding: 64,
  heads: 4,
  kvHeads: 2,
  feedForward: 128,
  /** `<unk>`, `<s>`, `</s>`, then one token per byte value. */
  vocabulary: 3 + 256,
} as const;

/**
 * ChatML, the template llama-server recognises by its `<|im_start|>` markers. The markers are
 * not tokens of this byte-level vocabulary: they are spelled out in bytes, which is all a
 * random-weight model needs.
 */
export const TINY_LLAMA_CHAT_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/**
 * Writes a random-weight llama model as GGUF: 2 layers, a byte-level SentencePiece-style
 * vocabulary (every byte is a `<0xNN>` token, so any text tokenizes), a chat template, and
 * F32 weights drawn from a seeded generator. About 0.6 MB. It answers nonsense, through the
 * real server and the real wire format: what tests of serving, not of language, need.
 */
export function tinyLlamaGguf(options: TinyLlamaOptions = {}): Uint8Array {
  const random = seededUniform(options.seed ?? 1);
  const { layers, embedding, heads, kvHeads, feedForward, vocabulary } = TINY_LLAMA;
  const headDim = embedding / heads;
  const kvWidth = kvHeads * headDim;

  const tokens = ["<unk>", "<s>", "</s>"];
  const types: number[] = [TOKEN_TYPE.unknown, TOKEN_TYPE.control, TOKEN_TYPE.control];
  for (let byte = 0; byte < 256; byte++) {
    tokens.push(`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(TOKEN_TYPE.byte);
  }

  const metadata = new Map<string, GgufValue>([
    ["general.architecture", { type: "string", value: "llama" }],
    ["general.name", { type: "string", value: options.name ?? "zml-tiny-llama" }],
    ["general.alignment", { type: "uint32", value: 32 }],
    ["llama.context_length", { type: "uint32", value: options.contextLength ?? 4096 }],
    ["llama.embedding_length", { type: "uint32", value: embedding }],
    ["llama.block_count", { type: "uint32", value: layers }],
    ["llama.feed_forward_length", { type: "uint32", value: feedForward }],
    ["llama.attention.head_count", { type: "uint32", value: heads }],
    ["llama.attention.head_count_kv", { type: "uint32", value: kvHeads }],
    ["llama.attention.layer_norm_rms_epsilon", { type: "float32", value: 1e-5 }],
    ["llama.rope.dimension_count", { type: "uint32", value: headDim }],
    ["llama.rope.freq_base", { type: "float32", value: 10_000 }],
    ["llama.vocab_size", { type: "uint32", value: vocabulary }],
    ["tokenizer.ggml.model", { type: "string", value: "llama" }],
    ["tokenizer.ggml.tokens", { type: "string[]", value: tokens }],
    ["tokenizer.ggml.scores", { type: "float32[]", value: tokens.map(() => 0) }],
    ["tokenizer.ggml.token_type", { type: "int32[]", value: types }],
    ["tokenizer.ggml.unknown_token_id", { type: "uint32", value: 0 }],
    ["tokenizer.ggml.bos_token_id", { type: "uint32", value: 1 }],
    ["tokenizer.ggml.eos_token_id", { type: "uint32", value: 2 }],
    ["tokenizer.ggml.add_bos_token", { type: "bool", value: true }],
    ["tokenizer.ggml.add_eos_token", { type: "bool", value: false }],
    ["tokenizer.chat_template", { type: "string", value: TINY_LLAMA_CHAT_TEMPLATE }],
  ]);

  // Weights scaled by 1/√fan-in keep activations near unit size through both layers.
  const matrix = (name: string, fanIn: number, fanOut: number): GgufTensor => ({
    name,
    shape: [fanIn, fanOut],
    data: Float32Array.from(
      { length: fanIn * fanOut },
      () => (random() * 2 - 1) / Math.sqrt(fanIn),
    ),
  });
  const ones = (name: string, size: number): GgufTensor => ({
    name,
    shape: [size],
    data: new Float32Array(size).fill(1),
  });
  // The output rows of every token but printable ASCII and newline are zero: their logit is
  // always 0 while the rest spread widely on both sides, so the default top-k never reaches
  // them. The model then writes valid UTF-8 text and never ends on its own (no `</s>`): every
  // answer runs to `max_tokens`, which tests can count on.
  const output = matrix("output.weight", embedding, vocabulary);
  for (let token = 0; token < vocabulary; token++) {
    if (isWrittenToken(token)) {
      for (let i = 0; i < embedding; i++) output.data[token * embedding + i]! *= 8;
    } else {
      output.data.fill(0, token * embedding, (token + 1) * embedding);
    }
  }
  const tensors: GgufTensor[] = [
    matrix("token_embd.weight", embedding, vocabulary),
    ones("output_norm.weight", embedding),
    output,
  ];
  for (let layer = 0; layer < layers; layer++) {
    const blk = `blk.${layer}`;
    tensors.push(
      ones(`${blk}.attn_norm.weight`, embedding),
      matrix(`${blk}.attn_q.weight`, embedding, embedding),
      matrix(`${blk}.attn_k.weight`, embedding, kvWidth),
      matrix(`${blk}.attn_v.weight`, embedding, kvWidth),
      matrix(`${blk}.attn_output.weight`, embedding, embedding),
      ones(`${blk}.ffn_norm.weight`, embedding),
      matrix(`${blk}.ffn_gate.weight`, embedding, feedForward),
      matrix(`${blk}.ffn_up.weight`, embedding, feedForward),
      matrix(`${blk}.ffn_down.weight`, feedForward, embedding),
    );
  }
  return writeGguf(metadata, tensors);
}

/** Byte tokens of printable ASCII and newline: what the model may write. */
function isWrittenToken(token: number): boolean {
  const byte = token - 3;
  return byte === 0x0a || (byte >= 0x20 && byte <= 0x7e);
}

/** llama.cpp's `llama_token_type` values used here. */
const TOKEN_TYPE = { unknown: 2, control: 3, byte: 6 } as const;

/** mulberry32: a small, fast, seeded generator of uniform numbers in [0, 1). */
function seededUniform(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
