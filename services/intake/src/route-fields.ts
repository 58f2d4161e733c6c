import { INFERENCE_PATHS, ZmlError } from "@zml/contracts";
import type { InferencePath } from "@zml/contracts";

/** What routing needs from a client's body, extracted once at the edge. */
export interface RouteFields {
  model: string;
  stream: boolean;
  tier: number;
  policy: string | undefined;
  acceleratorHint: string | undefined;
}

/**
 * Parses and checks an inference body. Only the routing fields are validated; every other
 * OpenAI parameter passes to the node untouched, as bytes. Throws ZmlError naming the field.
 */
export function extractRouteFields(path: InferencePath, raw: Buffer): RouteFields {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new ZmlError("invalid_json", "request body is not valid JSON", "body");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ZmlError("invalid_request", "request body must be a JSON object", "body");
  }
  const parsed = INFERENCE_PATHS[path].safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path.map(String).join(".") || "body";
    const message =
      issue.code === "invalid_type" && issue.input === undefined
        ? `missing required field '${param}'`
        : `invalid '${param}': ${issue.message}`;
    throw new ZmlError("invalid_request", message, param);
  }
  const data = parsed.data;
  return {
    model: data.model,
    stream: data.stream === true,
    tier: data.tier ?? 1,
    policy: data.policy,
    acceleratorHint: data.accelerator_hint,
  };
}
