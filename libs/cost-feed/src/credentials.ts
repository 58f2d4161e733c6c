import { readFile } from "node:fs/promises";
import { z } from "zod";
import { PriceSourceError } from "./errors.ts";

const AwsKeysSchema = z.strictObject({
  access_key_id: z.string().min(16).max(128),
  secret_access_key: z.string().min(16).max(256),
  session_token: z.string().min(1).optional(),
  /** ISO time the keys stop working, if they are temporary. */
  expiration: z.iso.datetime().optional(),
});
export type AwsKeys = z.infer<typeof AwsKeysSchema>;

const GcpKeySchema = z.union([
  z.strictObject({ api_key: z.string().min(8).max(256) }),
  z.strictObject({ access_token: z.string().min(8).max(4096) }),
]);
export type GcpCredential = z.infer<typeof GcpKeySchema>;

/**
 * Reads a credentials file afresh (so a rotated file takes effect on the next refresh).
 * Errors name the file and the problem, never its content.
 */
async function readJsonFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "unreadable";
    throw new PriceSourceError("credentials", `credentials file ${path} cannot be read (${code})`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new PriceSourceError("credentials", `credentials file ${path} is not JSON`);
  }
}

function fieldsOf(error: z.ZodError): string {
  return [...new Set(error.issues.map((i) => i.path.join(".") || "(file)"))].join(", ");
}

/** AWS keys from a secret file: `{ access_key_id, secret_access_key, session_token? }`. */
export async function readAwsKeys(path: string): Promise<AwsKeys> {
  const parsed = AwsKeysSchema.safeParse(await readJsonFile(path));
  if (!parsed.success) {
    throw new PriceSourceError(
      "credentials",
      `credentials file ${path}: bad or missing ${fieldsOf(parsed.error)}`,
    );
  }
  return parsed.data;
}

/** A GCP API key or OAuth access token from a secret file. */
export async function readGcpCredential(path: string): Promise<GcpCredential> {
  const parsed = GcpKeySchema.safeParse(await readJsonFile(path));
  if (!parsed.success) {
    throw new PriceSourceError(
      "credentials",
      `credentials file ${path}: expected { api_key } or { access_token }`,
    );
  }
  return parsed.data;
}
