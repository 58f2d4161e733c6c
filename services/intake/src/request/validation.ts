import { ZmlError } from "@zml/contracts";
import type { z } from "zod";
import { findDuplicateKey, isValidUtf8 } from "./json-guard.ts";

/**
 * Parses a body that must be a JSON object of UTF-8 text with no repeated key; throws
 * ZmlError naming `body`, or the repeated key's path. `beforeShape` runs on the parsed
 * object before any check of its shape: the tier gate, whose 403 comes first. A repeated key
 * is refused before it, as JSON the gateway does not read: with two `tier`s, which one is
 * asked for depends on the parser.
 */
export function parseJsonObject(raw: Buffer, beforeShape?: (body: object) => void): object {
  if (!isValidUtf8(raw)) {
    throw new ZmlError("invalid_json", "request body is not valid UTF-8", { param: "body" });
  }
  const text = raw.toString("utf8");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ZmlError("invalid_json", "request body is not valid JSON", { param: "body" });
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ZmlError("invalid_request", "request body must be a JSON object", { param: "body" });
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ZmlError("duplicate_field", `field '${duplicate}' appears more than once`, {
      param: duplicate,
    });
  }
  beforeShape?.(body);
  return body;
}

/** Validates with a zod schema; the first problem becomes a ZmlError naming its field. */
export function validate<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw zodError(parsed.error, value);
}

/**
 * A zod error as an `invalid_request` naming the first offending field; with `all`, the
 * message lists every problem (for admin documents, where fixing one at a time is tedious).
 * `input` is the validated value: it tells a missing field from one of the wrong type.
 */
export function zodError(error: z.ZodError, input: unknown, all = false): ZmlError {
  const first = describe(error.issues[0]!, input);
  if (!all || error.issues.length === 1)
    return new ZmlError("invalid_request", first.message, { param: first.param });
  const message = error.issues.map((i) => describe(i, input).message).join("; ");
  return new ZmlError("invalid_request", message, { param: first.param });
}

/** The value at `path` in `root`, or undefined when it (or a parent) is absent. */
function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let value = root;
  for (const key of path) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/** A JSON value's type, as a client would name it. */
function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

function describe(issue: z.core.$ZodIssue, input: unknown): { param: string; message: string } {
  if (issue.code === "unrecognized_keys") {
    const key = issue.keys[0] ?? "";
    const param = [...issue.path.map(String), key].join(".");
    return { param, message: `unknown field '${param}'` };
  }
  const param = issue.path.map(String).join(".") || "body";
  if (issue.code === "invalid_type") {
    const given = valueAt(input, issue.path);
    const message =
      given === undefined
        ? `missing required field '${param}'`
        : `wrong type for '${param}': expected ${issue.expected}, got ${jsonType(given)}`;
    return { param, message };
  }
  return { param, message: `invalid '${param}': ${issue.message}` };
}
