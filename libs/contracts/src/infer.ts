import { z } from "zod";
import { TierSchema } from "./fleet.ts";
import { ACCELERATOR_HINT_PATTERN, MessageSchema, SESSION_ID_PATTERN } from "./http.ts";

/**
 * ZML's native call, `POST /v1/infer`: a chat request with the routing fields as first-class
 * members. Unlike the OpenAI-compatible bodies it is strict — a misspelt field is an error,
 * not a parameter silently passed to the node. Intake turns it into a chat completion body
 * for the node; the answer is the node's chat completion with the same `x-zml-routing`.
 */
export const InferRequestSchema = z.strictObject({
  model: z.string().min(1).max(256),
  messages: z.array(MessageSchema).min(1),
  stream: z.boolean().optional(),
  policy: z.string().min(1).max(64).optional(),
  accelerator_hint: z
    .string()
    .regex(ACCELERATOR_HINT_PATTERN, "letters, digits, '.', '_' and '-', at most 64")
    .optional(),
  tier: TierSchema.optional(),
  /** Models tried in order after `model` when it cannot be served. */
  fallback_models: z.array(z.string().min(1).max(256)).max(8).optional(),
  /** Rank candidates by third-party quality, price or latency. */
  sort: z.enum(["quality", "price", "latency"]).optional(),
  session_id: z
    .string()
    .regex(SESSION_ID_PATTERN, "letters, digits, '.', '_', ':' and '-', at most 128")
    .optional(),
  // Generation parameters, forwarded to the node.
  max_tokens: z.number().int().positive().optional(),
  temperature: z.number().min(0).max(2).optional(),
  top_p: z.number().min(0).max(1).optional(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).optional(),
  seed: z.number().int().optional(),
});
export type InferRequest = z.infer<typeof InferRequestSchema>;

/** The generation parameters of an {@link InferRequest} that reach the node. */
export const INFER_GENERATION_FIELDS = [
  "max_tokens",
  "temperature",
  "top_p",
  "stop",
  "seed",
] as const;
