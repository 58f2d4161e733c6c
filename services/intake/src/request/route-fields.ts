import {
  INFER_GENERATION_FIELDS,
  INFERENCE_PATHS,
  InferRequestSchema,
  SEALED_REQUEST_MEDIA_TYPE,
  SealedRequestSchema,
  ZmlError,
} from "@zml/contracts";
import type { InferencePath } from "@zml/contracts";
import { promptPrefixOf } from "@zml/routing";
import type { PromptPrefix } from "@zml/routing";
import { parseJsonObject, validate } from "./validation.ts";

/** What routing needs from a client's body, extracted once at the edge. */
export interface RouteFields {
  model: string;
  stream: boolean;
  tier: number;
  policy: string | undefined;
  acceleratorHint: string | undefined;
  /** Models to try, in order, after `model`. */
  fallbackModels: string[];
  sort: string | undefined;
  sessionId: string | undefined;
  /** `max_tokens` (or `max_completion_tokens`) when the client sent a positive integer. */
  maxTokens: number | undefined;
  /** A sealed request's `key_id`: the session key it is sealed to. */
  sealedKeyId?: string;
  /**
   * Block digests of the prompt, for prefix-affinity routing: computed here, where the body
   * is already parsed, so nothing parses it again. Never set for a sealed body.
   */
  prefix?: PromptPrefix | undefined;
}

/** A native `/v1/infer` call: its routing fields and the chat completion body for the node. */
export interface NativeCall {
  fields: RouteFields;
  /** The OpenAI path and body the node receives. */
  path: InferencePath;
  body: Buffer;
}

/**
 * Parses and checks an OpenAI-compatible body. Only the routing fields are validated; every
 * other OpenAI parameter passes to the node untouched, as bytes. Throws ZmlError naming the
 * field. `beforeShape` (the tier gate) runs on the parsed body before any of its checks.
 */
export function extractRouteFields(
  path: InferencePath,
  raw: Buffer,
  beforeShape?: (body: object) => void,
): RouteFields {
  return routeFieldsOf(path, parseJsonObject(raw, beforeShape));
}

/**
 * The routing fields of a body that is already parsed (a batch job's `request`, parsed with
 * its job): checked by the same schema as {@link extractRouteFields}, with the same errors.
 */
export function routeFieldsOf(path: InferencePath, body: object): RouteFields {
  const data = validate(INFERENCE_PATHS[path], body);
  // Embeddings never stream, whatever the body says.
  const fields = fieldsOf(path === "/v1/embeddings" ? { ...data, stream: false } : data, {
    fallbackModels: data.models,
    sort: data.provider?.sort,
    maxTokens: maxTokensOf(data),
  });
  fields.prefix = prefixOf(path, data);
  return fields;
}

/**
 * The prompt's prefix, in the order the engine renders it; embeddings have no KV cache to
 * reuse. A tier-4 body never gets here in clear (refuseClearTier4).
 */
function prefixOf(path: InferencePath, data: Record<string, unknown>): PromptPrefix | undefined {
  switch (path) {
    case "/v1/chat/completions":
      return promptPrefixOf(data.messages);
    case "/v1/completions":
      return promptPrefixOf(data.prompt);
    case "/v1/responses":
      return promptPrefixOf(data.instructions, data.input);
    default:
      return undefined;
  }
}

/** Whether a request's content type says its body is a sealed tier-4 envelope. */
export function isSealedBody(contentType: string | undefined): boolean {
  return (contentType ?? "").split(";")[0]!.trim().toLowerCase() === SEALED_REQUEST_MEDIA_TYPE;
}

/**
 * The routing fields of a sealed tier-4 request: its envelope's clear fields, validated
 * strictly (no field beside them, so no prompt travels in clear by mistake). The sealed body
 * itself is never opened here: intake cannot.
 */
export function extractSealedFields(raw: Buffer): RouteFields {
  const envelope = validate(SealedRequestSchema, parseJsonObject(raw));
  return {
    model: envelope.model,
    stream: envelope.stream,
    tier: 4,
    policy: envelope.policy,
    acceleratorHint: undefined,
    fallbackModels: [],
    sort: undefined,
    sessionId: envelope.session_id,
    maxTokens: envelope.max_tokens,
    sealedKeyId: envelope.key_id,
  };
}

/**
 * Tier 4 is end to end: a prompt in clear at tier 4, or naming a session, is refused rather
 * than carried through the gateway where it could be read.
 */
export function refuseClearTier4(fields: RouteFields): RouteFields {
  if (fields.tier === 4 || fields.sessionId !== undefined) {
    throw new ZmlError(
      "sealed_body_required",
      `tier-4 requests are sealed to their session's attested key ` +
        `(content-type ${SEALED_REQUEST_MEDIA_TYPE}; the SDKs and \`zml seal-proxy\` do it): ` +
        "a clear body would be readable in the gateway",
      { param: fields.sessionId !== undefined ? "session_id" : "tier" },
    );
  }
  return fields;
}

/**
 * Parses a native `/v1/infer` body (strict: unknown fields are errors) and builds the chat
 * completion body the node gets: model, messages, stream and the generation parameters.
 * The routing fields travel in bus headers instead. `beforeShape` as for
 * {@link extractRouteFields}.
 */
export function parseNativeCall(raw: Buffer, beforeShape?: (body: object) => void): NativeCall {
  const data = validate(InferRequestSchema, parseJsonObject(raw, beforeShape));
  const forwarded: Record<string, unknown> = { model: data.model, messages: data.messages };
  if (data.stream !== undefined) forwarded.stream = data.stream;
  for (const key of INFER_GENERATION_FIELDS) {
    if (data[key] !== undefined) forwarded[key] = data[key];
  }
  return {
    path: "/v1/chat/completions",
    body: Buffer.from(JSON.stringify(forwarded)),
    fields: {
      ...fieldsOf(data, {
        fallbackModels: data.fallback_models,
        sort: data.sort,
        maxTokens: data.max_tokens,
      }),
      // The node renders the same messages: the forwarded body's prompt is the client's.
      prefix: promptPrefixOf(data.messages),
    },
  };
}

/** The fields both body shapes name alike, plus the three they name differently. */
function fieldsOf(
  data: {
    model: string;
    stream?: boolean | undefined;
    tier?: number | undefined;
    policy?: string | undefined;
    accelerator_hint?: string | undefined;
    session_id?: string | undefined;
  },
  named: {
    fallbackModels: string[] | undefined;
    sort: string | undefined;
    maxTokens: number | undefined;
  },
): RouteFields {
  return {
    model: data.model,
    stream: data.stream === true,
    tier: data.tier ?? 1,
    policy: data.policy,
    acceleratorHint: data.accelerator_hint,
    fallbackModels: named.fallbackModels ?? [],
    sort: named.sort,
    sessionId: data.session_id,
    maxTokens: named.maxTokens,
  };
}

/**
 * The output the client asked for at most, which routing takes as the request's expected
 * tokens. OpenAI bodies are passed through unchecked, so a value that is not a positive
 * integer is left for the node to refuse and routing uses the model's default.
 */
function maxTokensOf(data: Record<string, unknown>): number | undefined {
  for (const key of ["max_tokens", "max_completion_tokens", "max_output_tokens"]) {
    const value = data[key];
    if (typeof value === "number" && Number.isInteger(value) && value > 0) return value;
  }
  return undefined;
}
