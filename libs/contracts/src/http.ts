import { z } from "zod";
import { TierSchema } from "./fleet.ts";
import type { NodeApi } from "./fleet.ts";

/**
 * HTTP request bodies. The OpenAI-compatible bodies are loose objects: unknown OpenAI
 * parameters pass through to the node untouched. Only the fields routing needs are checked.
 */

export const MessageSchema = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
});

/**
 * Accelerator families and session ids travel in NATS headers, so they are restricted to
 * characters that cannot smuggle a header line.
 */
export const ACCELERATOR_HINT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** ZML's routing fields, accepted alongside the OpenAI parameters. */
const ZmlFields = {
  stream: z.boolean().optional(),
  policy: z.string().min(1).max(64).optional(),
  accelerator_hint: z
    .string()
    .regex(ACCELERATOR_HINT_PATTERN, "letters, digits, '.', '_' and '-', at most 64")
    .optional(),
  tier: TierSchema.optional(),
  session_id: z
    .string()
    .regex(SESSION_ID_PATTERN, "letters, digits, '.', '_', ':' and '-', at most 128")
    .optional(),
  provider: z.looseObject({ sort: z.enum(["quality", "price", "latency"]).optional() }).optional(),
  /** Fallback models, tried in order after `model`. */
  models: z.array(z.string().min(1).max(256)).max(8).optional(),
};

export const ChatCompletionRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  messages: z.array(MessageSchema).min(1),
  ...ZmlFields,
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;

export const CompletionRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  prompt: z.union([
    z.string(),
    z.array(z.string()),
    z.array(z.number()),
    z.array(z.array(z.number())),
  ]),
  ...ZmlFields,
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

/**
 * The OpenAI Responses API body. `input` is a string or a list of input items (messages,
 * tool outputs, …), passed to the node untouched; ZML keeps no conversation state, so a
 * request must carry its whole input.
 */
export const ResponsesRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string(), z.array(z.unknown()).min(1)]),
  ...ZmlFields,
});
export type ResponsesRequest = z.infer<typeof ResponsesRequestSchema>;

/** `/v1/embeddings`: one text, several, or token ids. Embeddings never stream. */
export const EmbeddingRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(z.number().int()).min(1),
    z.array(z.array(z.number().int()).min(1)).min(1),
  ]),
  encoding_format: z.enum(["float", "base64"]).optional(),
  dimensions: z.number().int().positive().optional(),
  // `stream` is accepted and ignored, as OpenAI does: an embedding is one JSON answer.
  ...ZmlFields,
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequestSchema>;

/** The OpenAI paths intake forwards, and the schema each body must satisfy. */
export const INFERENCE_PATHS = {
  "/v1/chat/completions": ChatCompletionRequestSchema,
  "/v1/completions": CompletionRequestSchema,
  "/v1/responses": ResponsesRequestSchema,
  "/v1/embeddings": EmbeddingRequestSchema,
} as const;
export type InferencePath = keyof typeof INFERENCE_PATHS;

/** The API each forwarded path belongs to, matched against a node's `apis`. */
export const INFERENCE_PATH_APIS: Readonly<Record<InferencePath, NodeApi>> = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completions",
  "/v1/responses": "responses",
  "/v1/embeddings": "embeddings",
};

export function isInferencePath(path: string): path is InferencePath {
  return Object.hasOwn(INFERENCE_PATHS, path);
}
