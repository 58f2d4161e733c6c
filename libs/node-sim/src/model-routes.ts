import type { ServerResponse } from "node:http";
import { sendJson } from "./http-reply.ts";
import { errorBodyJson } from "./openai-request.ts";
import type { SimFlavour } from "./types.ts";

/** `GET /v1/models` and `GET /v1/models/{id}`: the models the node serves, as model cards. */
export interface ModelRoutes {
  list(res: ServerResponse): void;
  one(res: ServerResponse, id: string): void;
}

export function createModelRoutes(flavour: SimFlavour, models: readonly string[]): ModelRoutes {
  const served = new Set(models);
  const createdS = Math.floor(Date.now() / 1000);
  const modelCard = (id: string) => ({
    id,
    object: "model",
    created: createdS,
    owned_by: flavour,
    root: id,
    parent: null,
  });
  const listBody = JSON.stringify({ object: "list", data: models.map(modelCard) });
  return {
    list(res) {
      sendJson(res, 200, listBody);
    },
    one(res, id) {
      if (!served.has(id)) {
        const message = `The model \`${id}\` does not exist.`;
        sendJson(res, 404, errorBodyJson({ status: 404, message, param: "model" }));
        return;
      }
      sendJson(res, 200, JSON.stringify(modelCard(id)));
    },
  };
}
