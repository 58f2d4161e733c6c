import type { RoutingInfo } from "./routing.ts";

/** One chat message (OpenAI shape; other fields such as `name` or `tool_calls` pass through). */
export interface ChatMessage {
  role: string;
  content?: string | unknown[] | null;
  [key: string]: unknown;
}

/** ZML's routing fields, accepted by both calls. */
export interface RoutingFields {
  stream?: boolean;
  /** A routing policy by name; default: the model's, else the account's. */
  policy?: string;
  /** Prefer this accelerator family (letters, digits, `.`, `_`, `-`; at most 64). */
  accelerator_hint?: string;
  /** Trust tier 1–4 (default 1); the account must be allowed it. */
  tier?: number;
  /** A tier-4 session's id: the request reaches only the session's node. */
  session_id?: string;
}

/**
 * `POST /v1/infer`, ZML's native call. Strict: the gateway refuses unknown fields rather than
 * pass a misspelt one to the node.
 */
export interface InferRequest extends RoutingFields {
  model: string;
  messages: ChatMessage[];
  /** Models tried in order after `model` when it cannot be served (at most 8). */
  fallback_models?: string[];
  /** Rank candidates by third-party quality, price or latency. */
  sort?: "quality" | "price" | "latency";
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  stop?: string | string[];
  seed?: number;
}

/** `POST /v1/chat/completions`: any OpenAI parameter, with ZML's routing fields alongside. */
export interface ChatCompletionRequest extends RoutingFields {
  model: string;
  messages: ChatMessage[];
  /** Fallback models, tried in order after `model` (OpenRouter's name for the chain). */
  models?: string[];
  /** `{ sort: "quality" }` opts into quality routing. */
  provider?: { sort?: "quality" | "price" | "latency"; [key: string]: unknown };
  [key: string]: unknown;
}

/** A chat completion as the node returned it (OpenAI shape; other fields pass through). */
export interface ChatCompletion {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: string; content: string | null; [key: string]: unknown };
    finish_reason: string | null;
    [key: string]: unknown;
  }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  [key: string]: unknown;
}

/** One streamed chunk (OpenAI `chat.completion.chunk`). */
export interface ChatCompletionChunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: string; content?: string | null; [key: string]: unknown };
    finish_reason: string | null;
    [key: string]: unknown;
  }>;
  [key: string]: unknown;
}

/** What every answer carries besides its body. */
export interface AnswerMeta {
  /** The routing decision, parsed from the `x-zml-routing` header. */
  routing: RoutingInfo;
  requestId: string | undefined;
}

/** A non-streamed answer: the completion, with `routing` and `requestId` added. */
export type InferResponse = ChatCompletion & AnswerMeta;

/**
 * A streamed answer. Iterate it for the chunks; the routing decision is known before the
 * first chunk. Iteration throws {@link ZmlApiError} when the stream ends with an error event
 * or without its `[DONE]` marker — a truncated answer never looks complete.
 */
export interface InferStream extends AsyncIterable<ChatCompletionChunk>, AnswerMeta {
  /** Stops the stream; the gateway cancels the node call. */
  abort(): void;
}

/** One model the fleet serves. */
export interface ModelInfo {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
}

/** `POST /v1/sessions` answer. Times are epoch milliseconds. */
export interface Session {
  object: "session";
  session_id: string;
  node_id: string;
  model: string;
  tier: number;
  created_at: number;
  expires_at: number;
  /**
   * The node's TDX quote: its REPORTDATA binds `nonce_hex`, the node's TLS key and
   * `session_public_key` (X25519, base64 SPKI DER); layout in `libs/tdx/README.md`.
   * Verifiable with Intel DCAP tooling.
   */
  attestation: {
    quote_b64: string;
    nonce_hex: string;
    session_public_key: string;
    /** SHA-256 (hex) of the SPKI DER of the TLS key the node attested with. */
    tls_key_sha256: string | null;
    measurement: Record<string, unknown>;
    tcb_status: string | null;
    verified_at: number;
  };
}
