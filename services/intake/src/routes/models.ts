import type { ModelSpec } from "@zml/contracts";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Authenticator } from "../auth.ts";

/** `GET /v1/models` answer, in the OpenAI list shape. */
export const ModelListSchema = z.object({
  object: z.literal("list"),
  data: z.array(
    z.object({
      id: z.string(),
      object: z.literal("model"),
      created: z.number().int(),
      owned_by: z.string(),
    }),
  ),
});
export type ModelList = z.infer<typeof ModelListSchema>;

export interface ModelRouteDeps {
  auth: Authenticator;
  models: ReadonlyMap<string, ModelSpec>;
  clock: () => number;
}

/** The configured models, read from memory. */
export function modelRoutes(deps: ModelRouteDeps) {
  return (app: FastifyInstance) => {
    app.get("/v1/models", (req): ModelList => {
      deps.auth.authenticate(req.headers.authorization, deps.clock());
      return {
        object: "list",
        data: [...deps.models.values()].map((m) => ({
          id: m.id,
          object: "model",
          created: 0,
          owned_by: "zml",
        })),
      };
    });
  };
}
