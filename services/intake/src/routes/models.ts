import { ZmlError } from "@zml/contracts";
import type { ModelSpec } from "@zml/contracts";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import type { Authenticator } from "../admission/auth.ts";
import { API_KEY, json } from "./docs.ts";

/** One model, in the OpenAI shape (`GET /v1/models/{id}`, and each entry of the list). */
export const ModelSchema = z
  .object({
    id: z.string(),
    object: z.literal("model"),
    created: z.number().int(),
    owned_by: z.string(),
  })
  .meta({ id: "Model" });
export type Model = z.infer<typeof ModelSchema>;

/** `GET /v1/models` answer, in the OpenAI list shape. */
export const ModelListSchema = z
  .object({
    object: z.literal("list"),
    data: z.array(ModelSchema),
  })
  .meta({ id: "ModelList" });
export type ModelList = z.infer<typeof ModelListSchema>;

export interface ModelRouteDeps {
  auth: Authenticator;
  models: ReadonlyMap<string, ModelSpec>;
  clock: () => number;
}

const toModel = (spec: ModelSpec): Model => ({
  id: spec.id,
  object: "model",
  created: 0,
  owned_by: "zml",
});

/** The configured models, read from memory. */
export function modelRoutes(deps: ModelRouteDeps) {
  return (app: FastifyInstance) => {
    app.get("/v1/models", (req): ModelList => {
      deps.auth.authenticate(req.headers.authorization, deps.clock());
      return { object: "list", data: [...deps.models.values()].map(toModel) };
    });
    // A wildcard, because model ids may hold a `/` (`meta-llama/Llama-3.1-8B-Instruct`),
    // sent encoded by the SDKs and bare by curl.
    app.get("/v1/models/*", (req): Model => {
      deps.auth.authenticate(req.headers.authorization, deps.clock());
      const id = (req.params as { "*": string })["*"];
      const spec = deps.models.get(id);
      if (!spec)
        throw new ZmlError("unknown_model", `model '${id}' does not exist`, { param: "model" });
      return toModel(spec);
    });
  };
}

/** The model routes in the OpenAPI document. */
export const modelPaths: ZodOpenApiPathsObject = {
  "/v1/models": {
    get: {
      operationId: "listModels",
      tags: ["models"],
      summary: "Models served by the fleet",
      description: "The configured models, read from memory.",
      security: API_KEY,
      responses: { "200": { description: "The model list", content: json(ModelListSchema) } },
    },
  },
  "/v1/models/{model}": {
    get: {
      operationId: "retrieveModel",
      tags: ["models"],
      summary: "One model",
      description: "A configured model, read from memory; 404 when there is none.",
      security: API_KEY,
      requestParams: {
        path: z.object({
          model: z
            .string()
            .meta({ description: "The model id; a `/` in it may be sent encoded or not" }),
        }),
      },
      responses: { "200": { description: "The model", content: json(ModelSchema) } },
    },
  },
};
