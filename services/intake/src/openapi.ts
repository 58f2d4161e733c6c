import {
  AccountSpecSchema,
  ApprovedMeasurementSchema,
  ChatCompletionRequestSchema,
  CompletionRequestSchema,
  CostEntrySchema,
  ErrorCodeSchema,
  InferRequestSchema,
  ModelSpecSchema,
  NodeSpecSchema,
  PolicySpecSchema,
  QualityScoreSchema,
  ROUTING_HTTP_HEADER,
  RevocationSchema,
} from "@zml/contracts";
import { z } from "zod";
import { ADMIN_RESOURCES } from "./admin/resources.ts";
import { AllowlistSchema } from "./allowlist.ts";
import { JobBodySchema } from "./routes/jobs.ts";
import { ModelListSchema } from "./routes/models.ts";
import { SessionBodySchema } from "./routes/sessions.ts";

/** The OpenAI error envelope every error answer uses. */
export const OpenAiErrorSchema = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: ErrorCodeSchema,
  }),
});

/** The schemas the API reads and writes, published as OpenAPI components. */
const COMPONENTS: Record<string, z.ZodType> = {
  ChatCompletionRequest: ChatCompletionRequestSchema,
  CompletionRequest: CompletionRequestSchema,
  InferRequest: InferRequestSchema,
  JobRequest: JobBodySchema,
  SessionRequest: SessionBodySchema,
  ModelList: ModelListSchema,
  Error: OpenAiErrorSchema,
  NodeSpec: NodeSpecSchema,
  ModelSpec: ModelSpecSchema,
  PolicySpec: PolicySpecSchema,
  AccountSpec: AccountSpecSchema,
  CostEntry: CostEntrySchema,
  QualityScore: QualityScoreSchema,
  ApprovedMeasurement: ApprovedMeasurementSchema,
  Revocation: RevocationSchema,
  Allowlist: AllowlistSchema,
};

/** Admin resource kind → its component. */
const ADMIN_COMPONENT: Record<string, string> = {
  nodes: "NodeSpec",
  models: "ModelSpec",
  policies: "PolicySpec",
  accounts: "AccountSpec",
  costs: "CostEntry",
  "quality-scores": "QualityScore",
  measurements: "ApprovedMeasurement",
  revocations: "Revocation",
};

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: object) => ({ "application/json": { schema } });
const errors = (...statuses: number[]) =>
  Object.fromEntries(
    statuses.map((s) => [String(s), { $ref: `#/components/responses/Error${s}` }]),
  );
const ERROR_STATUSES = [400, 401, 403, 404, 408, 413, 415, 429, 500, 502, 503, 504];

function toJsonSchema(schema: z.ZodType): object {
  const jsonSchema = z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });
  // Components are embedded in the document; a per-schema dialect marker does not belong.
  delete jsonSchema.$schema;
  return jsonSchema;
}

function inferenceOperation(summary: string, body: string) {
  return {
    summary,
    security: [{ apiKey: [] }],
    requestBody: { required: true, content: json(ref(body)) },
    responses: {
      "200": {
        description:
          "The node's answer: a JSON completion, or with `stream: true` server-sent events " +
          "ending in `data: [DONE]` (a stream that breaks ends with `event: error` instead).",
        headers: { [ROUTING_HTTP_HEADER]: { $ref: "#/components/headers/Routing" } },
        content: {
          "application/json": { schema: { type: "object", additionalProperties: true } },
          "text/event-stream": { schema: { type: "string" } },
        },
      },
      ...errors(400, 401, 403, 404, 408, 413, 429, 502, 503, 504),
    },
  };
}

function adminPaths(): Record<string, object> {
  const paths: Record<string, object> = {};
  const key = { name: "key", in: "path", required: true, schema: { type: "string" } };
  for (const r of ADMIN_RESOURCES) {
    const doc = ref(ADMIN_COMPONENT[r.kind]!);
    const stored = {
      type: "object",
      properties: { key: { type: "string" }, revision: { type: "integer" }, document: doc },
    };
    paths[`/admin/v1/${r.kind}`] = {
      get: {
        summary: `List ${r.kind}`,
        security: [{ adminToken: [] }],
        responses: {
          "200": {
            description: "Every stored document",
            content: json({
              type: "object",
              properties: { data: { type: "array", items: stored } },
            }),
          },
          ...errors(401, 503),
        },
      },
    };
    paths[`/admin/v1/${r.kind}/{key}`] = {
      parameters: [key],
      get: {
        summary: `Read one of ${r.kind}`,
        security: [{ adminToken: [] }],
        responses: {
          "200": { description: "The document", content: json(stored) },
          ...errors(401, 404, 503),
        },
      },
      put: {
        summary: `Create or replace one of ${r.kind}`,
        description: r.idField
          ? `\`${r.idField}\` must equal the key (it is filled from the key when omitted).`
          : undefined,
        security: [{ adminToken: [] }],
        requestBody: { required: true, content: json(doc) },
        responses: {
          "200": {
            description: "Updated, or unchanged when identical",
            content: json({ type: "object" }),
          },
          "201": { description: "Created", content: json({ type: "object" }) },
          ...errors(400, 401, 404, 413, 503),
        },
      },
      delete: {
        summary: `Delete one of ${r.kind}`,
        security: [{ adminToken: [] }],
        responses: { "200": { description: "Deleted" }, ...errors(401, 404, 503) },
      },
    };
  }
  paths["/admin/v1/accounts/{key}/keys"] = {
    parameters: [key],
    post: {
      summary: "Issue a new API key for an account",
      description: "Only the key's SHA-256 is stored; the key appears in this answer only.",
      security: [{ adminToken: [] }],
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
          }),
        },
        ...errors(401, 404, 503),
      },
    },
  };
  return paths;
}

const object = (description: string) => ({
  description,
  content: json({ type: "object", additionalProperties: true }),
});
const pathParam = (name: string) => ({
  name,
  in: "path",
  required: true,
  schema: { type: "string" },
});

/** Tier 4 sessions, independent attestation checks and batch jobs. */
function trustAndBatchPaths(): Record<string, object> {
  return {
    "/v1/sessions": {
      post: {
        summary: "Open a tier 4 session pinned to one freshly attested node",
        description:
          "The answer carries the node's quote: REPORTDATA = nonce ‖ SHA-256(session public key).",
        security: [{ apiKey: [] }],
        requestBody: { required: true, content: json(ref("SessionRequest")) },
        responses: { "201": object("The session"), ...errors(400, 401, 403, 404, 429, 503, 504) },
      },
    },
    "/v1/sessions/{id}": {
      parameters: [pathParam("id")],
      delete: {
        summary: "End a session (its owner only)",
        security: [{ apiKey: [] }],
        responses: { "204": { description: "Ended" }, ...errors(401, 404, 503) },
      },
    },
    "/v1/attestation": {
      get: {
        summary: "The public allowlist of tier 3–4 nodes and their attestation status",
        description:
          "No credentials. Every tier 3–4 node: id, tier, models, family, attested " +
          "measurement, TCB status, TLS key hash, attested-at, valid-until and status " +
          "(attested, expired, revoked with its reason, failing). With " +
          "`Accept: text/event-stream`, a stream of `allowlist` events, one per change. " +
          "Rendered live for people at `/allowlist`.",
        responses: {
          "200": {
            description: "The allowlist",
            content: { ...json(ref("Allowlist")), "text/event-stream": {} },
          },
        },
      },
    },
    "/v1/attestation/{node_id}": {
      parameters: [
        pathParam("node_id"),
        { name: "nonce", in: "query", required: false, schema: { type: "string" } },
      ],
      get: {
        summary: "A tier 3/4 node's raw TDX quote and verification, for independent checks",
        security: [{ apiKey: [] }],
        responses: {
          "200": object("Quote, verification, measurement, expiry"),
          ...errors(400, 401, 404, 503, 504),
        },
      },
    },
    "/v1/jobs": {
      post: {
        summary: "Queue a batch job on JetStream",
        security: [{ apiKey: [] }],
        requestBody: { required: true, content: json(ref("JobRequest")) },
        responses: {
          "202": object("Queued (or a duplicate of a queued job id)"),
          ...errors(400, 401, 403, 404, 429, 503),
        },
      },
    },
    "/v1/jobs/{id}": {
      parameters: [pathParam("id")],
      get: {
        summary: "A job's status and, once finished, its result",
        security: [{ apiKey: [] }],
        responses: { "200": object("Status and result"), ...errors(401, 404, 503) },
      },
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
    },
    paths: {
      "/v1/chat/completions": {
        post: inferenceOperation("OpenAI-compatible chat completion", "ChatCompletionRequest"),
      },
      "/v1/completions": {
        post: inferenceOperation("OpenAI-compatible text completion", "CompletionRequest"),
      },
      "/v1/infer": { post: inferenceOperation("ZML native inference call", "InferRequest") },
      "/v1/models": {
        get: {
          summary: "Models served by the fleet",
          security: [{ apiKey: [] }],
          responses: {
            "200": { description: "The model list", content: json(ref("ModelList")) },
            ...errors(401, 503),
          },
        },
      },
      ...trustAndBatchPaths(),
      ...adminPaths(),
    },
    components: {
      schemas: Object.fromEntries(
        Object.entries(COMPONENTS).map(([name, schema]) => [name, toJsonSchema(schema)]),
      ),
      headers: {
        Routing: {
          description:
            "The routing decision as an RFC 8941 dictionary: decision-id, node, policy, " +
            "family, queue-depth, tier, attempts.",
          schema: { type: "string" },
        },
      },
      responses: Object.fromEntries(
        ERROR_STATUSES.map((s) => [
          `Error${s}`,
          { description: `Error (${s})`, content: json(ref("Error")) },
        ]),
      ),
      securitySchemes: {
        apiKey: { type: "http", scheme: "bearer", description: "An account's API key" },
        adminToken: { type: "http", scheme: "bearer", description: "The admin token" },
      },
    },
  };
}
