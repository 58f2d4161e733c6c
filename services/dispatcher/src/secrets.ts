import { readFileSync } from "node:fs";
import { z } from "zod";

const SecretsSchema = z.record(z.string(), z.string().min(1));

/** Loads node credentials by reference; an unreadable or malformed file stops start-up. */
export function loadNodeSecrets(path: string | undefined): ReadonlyMap<string, string> {
  if (!path) return new Map();
  const parsed = SecretsSchema.safeParse(JSON.parse(readFileSync(path, "utf8")));
  if (!parsed.success) {
    throw new Error(`${path}: expected a JSON object of secret names to non-empty strings`);
  }
  return new Map(Object.entries(parsed.data));
}
