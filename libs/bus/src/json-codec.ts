import type { z } from "zod";

/** A message on the bus that does not match its schema. */
export class MessageValidationError extends Error {
  readonly code = "invalid_message";
  readonly subject: string;
  readonly issues: string[];
  constructor(subject: string, issues: string[]) {
    super(`invalid message on ${subject}: ${issues.join("; ")}`);
    this.name = "MessageValidationError";
    this.subject = subject;
    this.issues = issues;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Validates then encodes; a producer never puts an invalid message on the bus. */
export function encodeJson<S extends z.ZodType>(
  subject: string,
  schema: S,
  value: z.input<S>,
): Uint8Array {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new MessageValidationError(subject, describeIssues(parsed.error));
  return encoder.encode(JSON.stringify(parsed.data));
}

/** Decodes and validates; throws {@link MessageValidationError} for malformed or invalid data. */
export function decodeJson<S extends z.ZodType>(
  subject: string,
  schema: S,
  data: Uint8Array,
): z.output<S> {
  let raw: unknown;
  try {
    raw = JSON.parse(decoder.decode(data));
  } catch {
    throw new MessageValidationError(subject, ["body is not JSON"]);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new MessageValidationError(subject, describeIssues(parsed.error));
  return parsed.data;
}

function describeIssues(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`);
}
