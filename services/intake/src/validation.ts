import { ZmlError } from "@zml/contracts";
import type { z } from "zod";
import { findDuplicateKey, isValidUtf8 } from "./json-guard.ts";

/**
 * Parses a body that must be a JSON object of UTF-8 text with no repeated key; throws
 * ZmlError naming `body`, or the repeated key's path.
 */
export function parseJsonObject(raw: Buffer): object {
  if (!isValidUtf8(raw)) {
    throw new ZmlError("invalid_json", "request body is not valid UTF-8", "body");
  }
  const text = raw.toString("utf8");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ZmlError("invalid_json", "request body is not valid JSON", "body");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ZmlError("invalid_request", "request body must be a JSON object", "body");
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ZmlError("duplicate_field", `field '${duplicate}' appears more than once`, duplicate);
  }
  return body;
}

/** Validates with a zod schema; the first problem becomes a ZmlError naming its field. */
export function validate<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw zodError(parsed.error);
}

/**
 * A zod error as an `invalid_request` naming the first offending field; with `all`, the
 * message lists every problem (for admin documents, where fixing one at a time is tedious).
 */
export function zodError(error: z.ZodError, all = false): ZmlError {
  const first = describe(error.issues[0]!);
  if (!all || error.issues.length === 1)
    return new ZmlError("invalid_request", first.message, first.param);
  const message = error.issues.map((i) => describe(i).message).join("; ");
  return new ZmlError("invalid_request", message, first.param);
}

function describe(issue: z.core.$ZodIssue): { param: string; message: string } {
  if (issue.code === "unrecognized_keys") {
    const key = issue.keys[0] ?? "";
    const param = [...issue.path.map(String), key].join(".");
    return { param, message: `unknown field '${param}'` };
  }
  const param = issue.path.map(String).join(".") || "body";
  const message =
    issue.code === "invalid_type" && issue.input === undefined
      ? `missing required field '${param}'`
      : `invalid '${param}': ${issue.message}`;
  return { param, message };
}
