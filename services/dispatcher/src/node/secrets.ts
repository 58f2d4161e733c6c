import { configProblem, readConfigFile } from "@zml/runtime";
import { z } from "zod";

const SecretsSchema = z.record(z.string(), z.string().min(1));
const SETTING = "ZML_NODE_SECRETS_FILE";
const EXPECTED = 'a JSON object of secret names to non-empty strings, e.g. {"h100-key": "…"}';

/** Loads node credentials by reference; an unreadable or malformed file stops start-up. */
export function loadNodeSecrets(path: string | undefined): ReadonlyMap<string, string> {
  if (!path) return new Map();
  const text = readConfigFile(SETTING, path, "JSON secrets file").toString("utf8");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw configProblem(SETTING, `${path} is not JSON`, `write ${EXPECTED}`);
  }
  const parsed = SecretsSchema.safeParse(json);
  if (!parsed.success) {
    throw configProblem(SETTING, `${path} is not ${EXPECTED}`, `write ${EXPECTED}`);
  }
  return new Map(Object.entries(parsed.data));
}
