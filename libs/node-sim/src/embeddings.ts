import { createHash } from "node:crypto";
import { parseModelBody } from "./openai-request.ts";
import type { ApiError } from "./openai-request.ts";

/** Vector length when the request names no `dimensions`. */
export const SIM_EMBEDDING_DIMENSIONS = 64;
const MAX_DIMENSIONS = 4096;

/** A checked `POST /v1/embeddings` body. */
export interface EmbeddingRequest {
  model: string;
  /** One entry per input: a text, or token ids. */
  inputs: (string | number[])[];
  encoding: "float" | "base64";
  dimensions: number;
  promptTokens: number;
}

const bad = (message: string, param: string | null): ApiError => ({ status: 400, message, param });
const isTokenIds = (v: unknown): v is number[] =>
  Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));

function inputsOf(input: unknown): (string | number[])[] | null {
  if (typeof input === "string") return [input];
  if (isTokenIds(input)) return [input];
  if (!Array.isArray(input) || input.length === 0) return null;
  if (input.every((x) => typeof x === "string")) return input;
  if (input.every(isTokenIds)) return input;
  return null;
}

/**
 * Parses an embeddings body as vLLM answers it: 400 for bad JSON or a bad field, 404 for a
 * model the node does not serve.
 */
export function parseEmbeddingRequest(
  raw: Buffer,
  models: ReadonlySet<string>,
): EmbeddingRequest | ApiError {
  const parsed = parseModelBody(raw);
  if ("status" in parsed) return parsed;
  const { body, model } = parsed;
  const inputs = inputsOf(body["input"]);
  if (inputs === null) {
    return bad("input: expected a string, strings, token ids or lists of token ids", "input");
  }
  const format = body["encoding_format"] ?? "float";
  if (format !== "float" && format !== "base64") {
    return bad("encoding_format: expected 'float' or 'base64'", "encoding_format");
  }
  const dimensions = body["dimensions"] ?? SIM_EMBEDDING_DIMENSIONS;
  if (
    typeof dimensions !== "number" ||
    !Number.isInteger(dimensions) ||
    dimensions < 1 ||
    dimensions > MAX_DIMENSIONS
  ) {
    return bad(`dimensions: expected an integer from 1 to ${MAX_DIMENSIONS}`, "dimensions");
  }
  if (!models.has(model)) {
    return { status: 404, message: `The model \`${model}\` does not exist.`, param: "model" };
  }
  let promptTokens = 0;
  for (const input of inputs) {
    promptTokens +=
      typeof input === "string" ? Math.max(1, Math.ceil(input.length / 4)) : input.length;
  }
  return { model, inputs, encoding: format, dimensions, promptTokens };
}

/**
 * A unit vector that depends only on the model and the input, so equal texts embed
 * equally and tests can compare answers across nodes.
 */
export function embeddingOf(
  model: string,
  input: string | number[],
  dimensions: number,
): Float32Array {
  const seed = createHash("sha256").update(model).update("\0").update(JSON.stringify(input));
  const vector = new Float32Array(dimensions);
  let bytes = Buffer.alloc(0);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    if (bytes.length < 2) bytes = seed.copy().update(String(i)).digest();
    const value = bytes.readUInt16LE(0) / 32767.5 - 1;
    bytes = bytes.subarray(2);
    vector[i] = value;
    norm += value * value;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 1;
  for (let i = 0; i < dimensions; i++) vector[i] = vector[i]! * scale;
  return vector;
}

/** The OpenAI embeddings answer; `base64` is the little-endian float32 bytes, as OpenAI sends. */
export function embeddingsBody(request: EmbeddingRequest): string {
  return JSON.stringify({
    object: "list",
    data: request.inputs.map((input, index) => {
      const vector = embeddingOf(request.model, input, request.dimensions);
      return {
        object: "embedding",
        index,
        embedding:
          request.encoding === "base64"
            ? Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString("base64")
            : Array.from(vector),
      };
    }),
    model: request.model,
    usage: { prompt_tokens: request.promptTokens, total_tokens: request.promptTokens },
  });
}
