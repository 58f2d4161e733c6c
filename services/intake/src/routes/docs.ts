// What the route modules say about themselves in the OpenAPI document: each exports its
// operations (`ZodOpenApiPathsObject`) with the zod schemas it validates with, and
// `openapi/document.ts` assembles them, adding every operation's error answers.
import { z } from "zod";

/** Tags group the operations; each operation names exactly one. */
export const TAGS = [
  { name: "inference", description: "OpenAI-compatible calls and ZML's native call, routed" },
  { name: "models", description: "The models the fleet serves" },
  { name: "trust", description: "Tier 4 sessions and independent attestation checks" },
  { name: "batch", description: "Batch jobs on JetStream" },
  { name: "admin", description: "Fleet configuration (needs the admin token)" },
] as const;
export type Tag = (typeof TAGS)[number]["name"];

/** Security requirements, by the document's schemes: an account's API key, the admin token. */
export const API_KEY = [{ apiKey: [] }];
export const ADMIN_TOKEN = [{ adminToken: [] }];
/** Public: no credentials. */
export const NO_CREDENTIALS = [];

/** An answer the document does not pin down further: some JSON object. */
export const AnyObjectSchema = z.looseObject({});

/** A text/event-stream answer, as the client reads it. */
export const EventStreamSchema = z.string();

/** `application/json` content of the given schema. */
export const json = (schema: z.ZodType) => ({ "application/json": { schema } });
