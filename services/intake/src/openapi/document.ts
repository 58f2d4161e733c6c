import {
  AccountSpecSchema,
  CloudAccountSpecSchema,
  ApprovedMeasurementSchema,
  ChatCompletionRequestSchema,
  CompletionRequestSchema,
  CostEntrySchema,
  EmbeddingRequestSchema,
  ErrorCodeSchema,
  InferRequestSchema,
  ModelSpecSchema,
  NodeSpecSchema,
  PolicySpecSchema,
  QualityScoreSchema,
  ROUTING_HTTP_HEADER,
  ResponsesRequestSchema,
  RevocationSchema,
  SEALED_REQUEST_MEDIA_TYPE,
  SEALED_RESPONSE_MEDIA_TYPE,
  SealedRequestSchema,
} from "@zml/contracts";
import { z } from "zod";
import { ADMIN_RESOURCES } from "../admin/resources.ts";
import { AllowlistSchema } from "../allowlist/allowlist.ts";
import { JobBodySchema } from "../routes/jobs.ts";
import { ModelListSchema, ModelSchema } from "../routes/models.ts";
import { SessionBodySchema } from "../routes/sessions.ts";
import { errorStatusesOf, OPERATION_ERRORS, pascal } from "./operation-errors.ts";

const anyObject = { type: "object", additionalProperties: true };

/** The OpenAI error envelope every error answer uses. */
export const OpenAiErrorSchema = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: ErrorCodeSchema,
  }),
});

/**
 * Request bodies, published as they are accepted (zod's input side: defaults optional).
 * The admin documents are also answers, published apart as stored (defaults filled in), so
 * generated clients get an accurate type for each direction.
 */
const INPUTS: Record<string, z.ZodType> = {
  ChatCompletionRequest: ChatCompletionRequestSchema,
  CompletionRequest: CompletionRequestSchema,
  ResponsesRequest: ResponsesRequestSchema,
  EmbeddingRequest: EmbeddingRequestSchema,
  InferRequest: InferRequestSchema,
  JobRequest: JobBodySchema,
  SessionRequest: SessionBodySchema,
  SealedRequest: SealedRequestSchema,
};
const OUTPUTS: Record<string, z.ZodType> = {
  Model: ModelSchema,
  ModelList: ModelListSchema,
  Error: OpenAiErrorSchema,
  Allowlist: AllowlistSchema,
};
/** Admin resource kind → its document's component name and schema. */
const ADMIN_DOCUMENTS: Record<string, [string, z.ZodType]> = {
  nodes: ["NodeSpec", NodeSpecSchema],
  models: ["ModelSpec", ModelSpecSchema],
  policies: ["PolicySpec", PolicySpecSchema],
  accounts: ["AccountSpec", AccountSpecSchema],
  "cloud-accounts": ["CloudAccountSpec", CloudAccountSpecSchema],
  costs: ["CostEntry", CostEntrySchema],
  "quality-scores": ["QualityScore", QualityScoreSchema],
  measurements: ["ApprovedMeasurement", ApprovedMeasurementSchema],
  revocations: ["Revocation", RevocationSchema],
};

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: object) => ({ "application/json": { schema } });

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

/** Response extension listing the error codes a status may carry on this operation. */
export const ERROR_CODES_EXTENSION = "x-zml-error-codes";

/**
 * The error answers of an operation, from its codes in route-errors.ts: one response per
 * status, naming its codes, each in the error envelope; and, for the inference calls, the
 * node's own 4xx relayed as it came.
 */
function errorResponses(operationId: string): Record<string, object> {
  const errors = OPERATION_ERRORS[operationId];
  if (errors === undefined) throw new Error(`route-errors.ts lists no errors for ${operationId}`);
  const responses: Record<string, object> = {};
  for (const [status, codes] of errorStatusesOf(errors)) {
    const meaning = STATUS_MEANINGS[status];
    if (meaning === undefined) throw new Error(`no meaning written for status ${status}`);
    responses[String(status)] = {
      description: `${meaning}. Codes: ${codes.map((c) => `\`${c}\``).join(", ")}.`,
      [ERROR_CODES_EXTENSION]: codes,
      content: json(ref("Error")),
    };
  }
  if (errors.relaysNodeClientErrors) {
    responses["4XX"] = {
      description:
        "The node's own 4xx (402, 409, 422, 429…), relayed as the node sent it, without " +
        "retry: its status and body are the node's (also for the statuses above).",
      content: { "application/json": { schema: anyObject } },
    };
  }
  return responses;
}

function toJsonSchema(schema: z.ZodType, io: "input" | "output"): object {
  const jsonSchema = z.toJSONSchema(schema, { io, unrepresentable: "any" });
  // Components are embedded in the document; a per-schema dialect marker does not belong.
  delete jsonSchema.$schema;
  if (io === "input") describeDefaults(jsonSchema);
  return jsonSchema;
}

/**
 * On the input side a default is said in words, not as `default`: generators such as
 * openapi-typescript (by default) make every property with a `default` required, so a
 * request that leaves it out, as it may, would not type-check.
 */
function describeDefaults(node: unknown): void {
  if (Array.isArray(node)) {
    for (const item of node) describeDefaults(item);
    return;
  }
  if (typeof node !== "object" || node === null) return;
  const schema = node as Record<string, unknown>;
  if ("default" in schema) {
    const said = `Default: \`${JSON.stringify(schema.default)}\`.`;
    schema.description =
      typeof schema.description === "string" ? `${schema.description} ${said}` : said;
    delete schema.default;
  }
  for (const value of Object.values(schema)) describeDefaults(value);
}

/** Tags group the operations; each operation names exactly one. */
const TAGS = [
  { name: "inference", description: "OpenAI-compatible calls and ZML's native call, routed" },
  { name: "models", description: "The models the fleet serves" },
  { name: "trust", description: "Tier 4 sessions and independent attestation checks" },
  { name: "batch", description: "Batch jobs on JetStream" },
  { name: "admin", description: "Fleet configuration (needs the admin token)" },
] as const;

interface OperationSpec {
  operationId: string;
  tag: (typeof TAGS)[number]["name"];
  summary: string;
  description: string;
  /** `none`: public, no credentials. */
  security: "apiKey" | "adminToken" | "none";
  requestBody?: object;
  /** More media types the request body may have, beside `application/json`. */
  requestTypes?: Record<string, object>;
  responses: Record<string, object>;
}

const operation = (o: OperationSpec) => ({
  operationId: o.operationId,
  tags: [o.tag],
  summary: o.summary,
  description: o.description,
  security: o.security === "none" ? [] : [{ [o.security]: [] }],
  ...(o.requestBody
    ? { requestBody: { required: true, content: { ...json(o.requestBody), ...o.requestTypes } } }
    : {}),
  responses: { ...o.responses, ...errorResponses(o.operationId) },
});
const object = (description: string) => ({ description, content: json(anyObject) });

function inferenceOperation(
  operationId: string,
  summary: string,
  body: string,
  answer: string,
  streams: boolean,
  sealable = true,
) {
  const content: Record<string, object> = { "application/json": { schema: anyObject } };
  if (streams) content["text/event-stream"] = { schema: { type: "string" } };
  if (sealable) content[SEALED_RESPONSE_MEDIA_TYPE] = { schema: anyObject };
  return operation({
    operationId,
    tag: "inference",
    summary,
    description:
      `${answer} The body reaches the node unchanged; only the routing fields are checked, ` +
      "and only nodes serving this API are candidates." +
      (streams
        ? " With `stream: true` the answer is server-sent events, relayed whole; a stream " +
          "that breaks ends with `event: error` instead of its final event."
        : "") +
      (sealable
        ? ` A tier-4 request is sent sealed (\`${SEALED_REQUEST_MEDIA_TYPE}\`, docs/sealed-channel.md): ` +
          "its answer is sealed too, and the body is never opened in the gateway."
        : ""),
    security: "apiKey",
    requestBody: ref(body),
    ...(sealable
      ? { requestTypes: { [SEALED_REQUEST_MEDIA_TYPE]: { schema: ref("SealedRequest") } } }
      : {}),
    responses: {
      "200": {
        description: "The node's answer",
        headers: { [ROUTING_HTTP_HEADER]: { $ref: "#/components/headers/Routing" } },
        content,
      },
    },
  });
}

function adminPaths(): Record<string, object> {
  const paths: Record<string, object> = {};
  const key = {
    name: "key",
    in: "path",
    required: true,
    description: "The document's key",
    schema: { type: "string" },
  };
  const changed = { type: "object", additionalProperties: true };
  for (const r of ADMIN_RESOURCES) {
    const [component] = ADMIN_DOCUMENTS[r.kind]!;
    const name = pascal(r.kind);
    const stored = {
      type: "object",
      properties: {
        key: { type: "string" },
        revision: { type: "integer" },
        document: ref(component),
      },
      required: ["key", "revision", "document"],
    };
    paths[`/admin/v1/${r.kind}`] = {
      get: operation({
        operationId: `adminList${name}`,
        tag: "admin",
        summary: `List ${r.kind}`,
        description: `Every stored document of ${r.kind}, with its key and revision.`,
        security: "adminToken",
        responses: {
          "200": {
            description: "Every stored document",
            content: json({
              type: "object",
              properties: { data: { type: "array", items: stored } },
              required: ["data"],
            }),
          },
        },
      }),
    };
    paths[`/admin/v1/${r.kind}/{key}`] = {
      parameters: [key],
      get: operation({
        operationId: `adminGet${name}`,
        tag: "admin",
        summary: `Read one of ${r.kind}`,
        description: `The stored document under the key, as the services read it.`,
        security: "adminToken",
        responses: {
          "200": { description: "The document", content: json(stored) },
        },
      }),
      put: operation({
        operationId: `adminPut${name}`,
        tag: "admin",
        summary: `Create or replace one of ${r.kind}`,
        description:
          "Validated like `zml apply`; takes effect without restarts." +
          (r.idField
            ? ` \`${r.idField}\` must equal the key (it is filled from the key when omitted).`
            : ""),
        security: "adminToken",
        requestBody: ref(`${component}Input`),
        responses: {
          "200": { description: "Updated, or unchanged when identical", content: json(changed) },
          "201": { description: "Created", content: json(changed) },
        },
      }),
      delete: operation({
        operationId: `adminDelete${name}`,
        tag: "admin",
        summary: `Delete one of ${r.kind}`,
        description: "Removes the document; services drop it from memory at once.",
        security: "adminToken",
        responses: { "200": { description: "Deleted" } },
      }),
    };
  }
  paths["/admin/v1/accounts/{key}/keys"] = {
    parameters: [key],
    post: operation({
      operationId: "adminIssueAccountKey",
      tag: "admin",
      summary: "Issue a new API key for an account",
      description: "Only the key's SHA-256 is stored; the key appears in this answer only.",
      security: "adminToken",
      responses: {
        "201": {
          description: "The new key",
          content: json({
            type: "object",
            properties: {
              account: { type: "string" },
              api_key: { type: "string" },
              sha256: { type: "string" },
            },
            required: ["account", "api_key", "sha256"],
          }),
        },
      },
    }),
  };
  return paths;
}

const pathParam = (name: string, description: string) => ({
  name,
  in: "path",
  required: true,
  description,
  schema: { type: "string" },
});

/** Tier 4 sessions, independent attestation checks and batch jobs. */
function trustAndBatchPaths(): Record<string, object> {
  return {
    "/v1/sessions": {
      post: operation({
        operationId: "createSession",
        tag: "trust",
        summary: "Open a tier 4 session pinned to one freshly attested node",
        description:
          "The answer carries the node's quote: REPORTDATA = nonce ‖ SHA-256(session public key).",
        security: "apiKey",
        requestBody: ref("SessionRequest"),
        responses: { "201": object("The session") },
      }),
    },
    "/v1/sessions/{id}": {
      parameters: [pathParam("id", "The session id")],
      delete: operation({
        operationId: "deleteSession",
        tag: "trust",
        summary: "End a session (its owner only)",
        description: "Ends the session at once; later requests with its id are refused.",
        security: "apiKey",
        responses: { "204": { description: "Ended" } },
      }),
    },
    "/v1/attestation": {
      get: operation({
        operationId: "getAllowlist",
        tag: "trust",
        summary: "The public allowlist of tier 3–4 nodes and their attestation status",
        security: "none",
        description:
          "No credentials. Every tier 3–4 node: id, tier, models, family, attested " +
          "measurement, TCB status, TLS key hash, attested-at, valid-until and status " +
          "(attested, expired, revoked with its reason, failing). With " +
          "`Accept: text/event-stream`, a stream of `allowlist` events, one per change. " +
          "Rendered live for people at `/allowlist`.",
        responses: {
          "200": {
            description: "The allowlist",
            content: {
              ...json(ref("Allowlist")),
              "text/event-stream": { schema: { type: "string" } },
            },
          },
        },
      }),
    },
    "/v1/attestation/{node_id}": {
      parameters: [
        pathParam("node_id", "A tier 3 or 4 node"),
        {
          name: "nonce",
          in: "query",
          required: false,
          description: "32 bytes of hex to bind into a fresh quote",
          schema: { type: "string" },
        },
      ],
      get: operation({
        operationId: "getAttestation",
        tag: "trust",
        summary: "A tier 3/4 node's raw TDX quote and verification, for independent checks",
        description:
          "The quote is base64, verifiable with Intel DCAP tooling. Every node that is not a " +
          "tier 3/4 node, whether it exists or not, gets the same 404 `not_found`, byte for byte.",
        security: "apiKey",
        responses: {
          "200": object("Quote, verification, measurement, expiry"),
        },
      }),
    },
    "/v1/jobs": {
      post: operation({
        operationId: "createJob",
        tag: "batch",
        summary: "Queue a batch job on JetStream",
        description: "The job waits in JetStream until capacity exists; its result is kept.",
        security: "apiKey",
        requestBody: ref("JobRequest"),
        responses: {
          "202": object("Queued (or a duplicate of a queued job id)"),
        },
      }),
    },
    "/v1/jobs/{id}": {
      parameters: [pathParam("id", "The job id")],
      get: operation({
        operationId: "getJob",
        tag: "batch",
        summary: "A job's status and, once finished, its result",
        description: "Only the account that queued the job can read it.",
        security: "apiKey",
        responses: { "200": object("Status and result") },
      }),
    },
  };
}

/**
 * The OpenAPI 3.1 document of the intake API, generated from the same zod schemas that
 * validate requests and admin documents, so the two cannot drift apart.
 */
export function buildOpenApiDocument(version: string): object {
  return {
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
    tags: TAGS,
    paths: {
      "/v1/chat/completions": {
        post: inferenceOperation(
          "createChatCompletion",
          "OpenAI-compatible chat completion",
          "ChatCompletionRequest",
          "A chat completion.",
          true,
        ),
      },
      "/v1/completions": {
        post: inferenceOperation(
          "createCompletion",
          "OpenAI-compatible text completion",
          "CompletionRequest",
          "A text completion.",
          true,
        ),
      },
      "/v1/responses": {
        post: inferenceOperation(
          "createResponse",
          "OpenAI Responses API",
          "ResponsesRequest",
          "A response object; ZML stores none, so the input must be whole.",
          true,
        ),
      },
      "/v1/embeddings": {
        post: inferenceOperation(
          "createEmbedding",
          "OpenAI-compatible embeddings",
          "EmbeddingRequest",
          "One embedding per input, as floats or base64.",
          false,
        ),
      },
      "/v1/infer": {
        post: inferenceOperation(
          "infer",
          "ZML native inference call",
          "InferRequest",
          "A chat completion, from a strict body with the routing fields first-class.",
          true,
          false,
        ),
      },
      "/v1/models": {
        get: operation({
          operationId: "listModels",
          tag: "models",
          summary: "Models served by the fleet",
          description: "The configured models, read from memory.",
          security: "apiKey",
          responses: {
            "200": { description: "The model list", content: json(ref("ModelList")) },
          },
        }),
      },
      "/v1/models/{model}": {
        parameters: [pathParam("model", "The model id; a `/` in it may be sent encoded or not")],
        get: operation({
          operationId: "retrieveModel",
          tag: "models",
          summary: "One model",
          description: "A configured model, read from memory; 404 when there is none.",
          security: "apiKey",
          responses: {
            "200": { description: "The model", content: json(ref("Model")) },
          },
        }),
      },
      ...trustAndBatchPaths(),
      ...adminPaths(),
    },
    components: {
      schemas: {
        ...Object.fromEntries(
          Object.entries(INPUTS).map(([name, schema]) => [name, toJsonSchema(schema, "input")]),
        ),
        ...Object.fromEntries(
          Object.entries(OUTPUTS).map(([name, schema]) => [name, toJsonSchema(schema, "output")]),
        ),
        ...Object.fromEntries(
          Object.values(ADMIN_DOCUMENTS).flatMap(([name, schema]) => [
            [name, toJsonSchema(schema, "output")],
            [`${name}Input`, toJsonSchema(schema, "input")],
          ]),
        ),
      },
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
}
