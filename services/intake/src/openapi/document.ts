import {
  ChatCompletionRequestSchema,
  CompletionRequestSchema,
  EmbeddingRequestSchema,
  ErrorCodeSchema,
  InferRequestSchema,
  ResponsesRequestSchema,
  SealedRequestSchema,
} from "@zml/contracts";
import { z } from "zod";
import { createDocument } from "zod-openapi";
import type {
  ZodOpenApiObject,
  ZodOpenApiOverrideContext,
  ZodOpenApiPathsObject,
  ZodOpenApiResponsesObject,
} from "zod-openapi";
import { AllowlistSchema } from "../allowlist/allowlist.ts";
import { adminApiDocs } from "../routes/admin.ts";
import { allowlistPaths } from "../routes/allowlist.ts";
import { attestationPaths } from "../routes/attestation.ts";
import { AnyObjectSchema, TAGS } from "../routes/docs.ts";
import { inferencePaths } from "../routes/inference.ts";
import { JobBodySchema, jobPaths } from "../routes/jobs.ts";
import { modelPaths } from "../routes/models.ts";
import { SessionBodySchema, sessionPaths } from "../routes/sessions.ts";
import { errorStatusesOf, OPERATION_ERRORS } from "./operation-errors.ts";

/** The OpenAI error envelope every error answer uses. */
export const OpenAiErrorSchema = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: ErrorCodeSchema,
  }),
});

/** Response extension listing the error codes a status may carry on this operation. */
export const ERROR_CODES_EXTENSION = "x-zml-error-codes";

/**
 * Schemas by the name the document gives them: wherever a route's operation uses one of
 * these objects, the document refers to it by this name. (`Model` and `ModelList` name
 * themselves in their `meta`: a named schema inside another named one would be written
 * twice here, once per direction.)
 */
const NAMED_SCHEMAS: Record<string, z.ZodType> = {
  ChatCompletionRequest: ChatCompletionRequestSchema,
  CompletionRequest: CompletionRequestSchema,
  ResponsesRequest: ResponsesRequestSchema,
  EmbeddingRequest: EmbeddingRequestSchema,
  InferRequest: InferRequestSchema,
  JobRequest: JobBodySchema,
  SessionRequest: SessionBodySchema,
  SealedRequest: SealedRequestSchema,
  Allowlist: AllowlistSchema,
  Error: OpenAiErrorSchema,
};

/** What each error status means, whichever code answers it. */
const STATUS_MEANINGS: Record<number, string> = {
  400: "Invalid request: the error names the offending field",
  401: "Missing or unknown credential",
  403: "The account may not use this tier",
  404: "No such resource, model, job or session",
  408: "The request body arrived too slowly",
  409: "A sealed request that was opened before (a replay)",
  410: "The session expired, or its key is gone",
  413: "The request body is too large",
  415: "The request's content type cannot be read",
  429: "Rate limited, or too many failed authentications from this address; see Retry-After",
  500: "An error the gateway did not expect",
  502: "Every attempt failed, or the node's answer was refused",
  503: "Not available now (no usable node, the message bus, a stopping replica); see Retry-After",
  504: "The deadline passed",
};

/**
 * The error answers of an operation, from its codes in operation-errors.ts: one response per
 * status, naming its codes, each in the error envelope; and, for the inference calls, the
 * node's own 4xx relayed as it came.
 */
function errorResponses(operationId: string): ZodOpenApiResponsesObject {
  const errors = OPERATION_ERRORS[operationId];
  if (errors === undefined) {
    throw new Error(`operation-errors.ts lists no errors for ${operationId}`);
  }
  const responses: ZodOpenApiResponsesObject = {};
  for (const [status, codes] of errorStatusesOf(errors)) {
    const meaning = STATUS_MEANINGS[status];
    if (meaning === undefined) throw new Error(`no meaning written for status ${status}`);
    responses[String(status) as `${1 | 2 | 3 | 4 | 5}${string}`] = {
      description: `${meaning}. Codes: ${codes.map((c) => `\`${c}\``).join(", ")}.`,
      [ERROR_CODES_EXTENSION]: codes,
      content: { "application/json": { schema: OpenAiErrorSchema } },
    };
  }
  if (errors.relaysNodeClientErrors) {
    responses["4XX"] = {
      description:
        "The node's own 4xx (402, 409, 422, 429…), relayed as the node sent it, without " +
        "retry: its status and body are the node's (also for the statuses above).",
      content: { "application/json": { schema: AnyObjectSchema } },
    };
  }
  return responses;
}

/** Every operation of `paths` with its error answers added beside its own. */
function withErrorResponses(paths: ZodOpenApiPathsObject): ZodOpenApiPathsObject {
  const methods = ["get", "put", "post", "delete"] as const;
  return Object.fromEntries(
    Object.entries(paths).map(([path, item]) => {
      const withErrors = { ...item };
      for (const method of methods) {
        const op = item[method];
        if (op === undefined) continue;
        if (op.operationId === undefined) throw new Error(`${method} ${path} has no operationId`);
        withErrors[method] = {
          ...op,
          responses: { ...op.responses, ...errorResponses(op.operationId) },
        };
      }
      return [path, withErrors];
    }),
  );
}

/**
 * On the input side a default is said in words, not as `default`: generators such as
 * openapi-typescript (by default) make every property with a `default` required, so a
 * request that leaves it out, as it may, would not type-check.
 */
function describeDefaults({ jsonSchema, io }: ZodOpenApiOverrideContext): void {
  if (io !== "input" || !("default" in jsonSchema)) return;
  const said = `Default: \`${JSON.stringify(jsonSchema.default)}\`.`;
  jsonSchema.description =
    typeof jsonSchema.description === "string" ? `${jsonSchema.description} ${said}` : said;
  delete jsonSchema.default;
}

/**
 * The OpenAPI 3.1 document of the intake API, generated by zod-openapi from the operations
 * each route module declares with the zod schemas it validates with (and the admin
 * documents' own schemas), plus each operation's error answers from operation-errors.ts.
 * Request bodies are published as they are accepted (zod's input side: defaults optional);
 * answers as they are sent.
 */
export function buildOpenApiDocument(version: string): object {
  const admin = adminApiDocs();
  const document: ZodOpenApiObject = {
    openapi: "3.1.0",
    info: {
      title: "ZML gateway",
      version,
      description:
        "OpenAI-compatible inference with routing across accelerator families and trust " +
        "tiers, ZML's native call and the admin API. Errors use the OpenAI error shape.",
      contact: { name: "ZML maintainers", url: "https://github.com/zml" },
    },
    // Relative: the intake that serves this document (at `/openapi.json`), wherever it runs.
    servers: [{ url: "/", description: "The intake serving this document" }],
    tags: [...TAGS],
    paths: withErrorResponses({
      ...inferencePaths,
      ...modelPaths,
      ...sessionPaths,
      ...allowlistPaths,
      ...attestationPaths,
      ...jobPaths,
      ...admin.paths,
    }),
    components: {
      schemas: { ...NAMED_SCHEMAS, ...admin.schemas },
      headers: {
        Routing: {
          description:
            "The routing decision as an RFC 8941 dictionary: decision-id, node, policy, " +
            "family, queue-depth, tier, attempts.",
          schema: { type: "string" },
        },
      },
      securitySchemes: {
        apiKey: { type: "http", scheme: "bearer", description: "An account's API key" },
        adminToken: { type: "http", scheme: "bearer", description: "The admin token" },
      },
    },
  };
  return createDocument(document, {
    override: describeDefaults,
    // What a transform gives is not said by its schema: such a field's answer is left open
    // (`{}`), as zod's own generator leaves it.
    allowEmptySchema: { pipe: { output: true } },
  });
}
