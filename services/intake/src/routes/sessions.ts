import { requestJson } from "@zml/bus";
import {
  NonceHexSchema,
  SESSION_CREATE_BUDGET_MS,
  SESSION_CREATE_ENDPOINT,
  SESSION_DELETE_ENDPOINT,
  SESSION_MAX_TTL_S,
  ZmlError,
} from "@zml/contracts";
import type { Session } from "@zml/contracts";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { admit } from "../admission/admit.ts";
import type { ClientRouteDeps } from "./deps.ts";
import { AnyObjectSchema, API_KEY, json } from "./docs.ts";
import { policyNameFor } from "../request/policy.ts";
import { authoriseTiers, SEALED_TIER } from "../admission/tier-gate.ts";
import { parseJsonObject, validate } from "../request/validation.ts";

/** `POST /v1/sessions` body. */
export const SessionBodySchema = z.strictObject({
  model: z.string().min(1).max(256),
  policy: z.string().min(1).max(64).optional(),
  /** Lifetime in seconds (default 3600). */
  ttl_s: z.number().int().min(1).max(SESSION_MAX_TTL_S).optional(),
  /** The client's own nonce for the quote's REPORTDATA (32 bytes, lowercase hex). */
  nonce: z
    .string()
    .transform((s) => s.toLowerCase())
    .pipe(NonceHexSchema)
    .optional(),
  /** Sessions are tier 4; accepted so a client may say so. */
  tier: z.literal(SEALED_TIER).optional(),
});

/** `POST /v1/sessions` answer (201). Times are epoch milliseconds. */
export interface SessionView {
  object: "session";
  session_id: string;
  node_id: string;
  model: string;
  tier: number;
  created_at: number;
  expires_at: number;
  /**
   * The node's quote: REPORTDATA = `nonce_hex` ‖ SHA-256(base64-decoded
   * `session_public_key`), verifiable with Intel DCAP tooling.
   */
  attestation: Session["attestation"];
}

export type SessionRouteDeps = ClientRouteDeps;

/**
 * Tier-4 sessions. `POST /v1/sessions` has a dispatcher pick an attested tier-4 node for
 * the model and attest it afresh with an ephemeral session key; chat requests that carry
 * the returned `session_id` (and `tier: 4`) then reach that node only, and fail with
 * `session_node_unavailable` if it fails. `DELETE /v1/sessions/{id}` ends the session (its
 * owner only; 204).
 */
export function sessionRoutes(deps: SessionRouteDeps) {
  return (app: FastifyInstance) => {
    app.post("/v1/sessions", async (req, reply) => {
      const account = admit(deps, req.headers.authorization, deps.clock());
      // Before the body is read at all: a session is tier 4, whatever its body says.
      authoriseTiers(account, [SEALED_TIER]);
      const body = validate(SessionBodySchema, parseJsonObject(bodyOf(req)));
      const model = deps.models.get(body.model);
      if (!model)
        throw new ZmlError("unknown_model", `model '${body.model}' does not exist`, {
          param: "model",
        });
      const policy = policyNameFor(body.policy, model.id, account, deps);
      const answer = await requestJson(
        deps.bus,
        SESSION_CREATE_ENDPOINT,
        {
          type: "session.create.v1",
          account: account.id,
          model: model.id,
          policy,
          ...(body.ttl_s === undefined ? {} : { ttl_s: body.ttl_s }),
          ...(body.nonce === undefined ? {} : { nonce: body.nonce }),
        },
        { timeoutMs: SESSION_CREATE_BUDGET_MS + 5_000, service: "the dispatchers" },
      );
      if ("error" in answer) throw ZmlError.fromBody(answer.error);
      return reply.code(201).send(present(answer.session));
    });

    app.delete<{ Params: { id: string } }>("/v1/sessions/:id", async (req, reply) => {
      const account = admit(deps, req.headers.authorization, deps.clock());
      const id = req.params.id;
      if (id.length > 128)
        throw new ZmlError("session_not_found", "no such session", { param: "id" });
      const answer = await requestJson(
        deps.bus,
        SESSION_DELETE_ENDPOINT,
        {
          type: "session.delete.v1",
          account: account.id,
          session_id: id,
        },
        { timeoutMs: 10_000, service: "the dispatchers" },
      );
      if ("error" in answer) throw ZmlError.fromBody(answer.error);
      return reply.code(204).send();
    });
  };
}

function bodyOf(req: FastifyRequest): Buffer {
  if (!Buffer.isBuffer(req.body) || req.body.length === 0) {
    throw new ZmlError("invalid_request", "request body is required", { param: "body" });
  }
  return req.body;
}

function present(s: Session): SessionView {
  const { session_id, node_id, model, tier, created_at, expires_at, attestation } = s;
  return {
    object: "session",
    session_id,
    node_id,
    model,
    tier,
    created_at,
    expires_at,
    attestation,
  };
}

/** The session routes in the OpenAPI document. */
export const sessionPaths: ZodOpenApiPathsObject = {
  "/v1/sessions": {
    post: {
      operationId: "createSession",
      tags: ["trust"],
      summary: "Open a tier 4 session pinned to one freshly attested node",
      description:
        "The answer carries the node's quote: REPORTDATA = nonce ‖ SHA-256(session public key).",
      security: API_KEY,
      requestBody: { required: true, content: json(SessionBodySchema) },
      responses: { "201": { description: "The session", content: json(AnyObjectSchema) } },
    },
  },
  "/v1/sessions/{id}": {
    delete: {
      operationId: "deleteSession",
      tags: ["trust"],
      summary: "End a session (its owner only)",
      description: "Ends the session at once; later requests with its id are refused.",
      security: API_KEY,
      requestParams: { path: z.object({ id: z.string().meta({ description: "The session id" }) }) },
      responses: { "204": { description: "Ended" } },
    },
  },
};
