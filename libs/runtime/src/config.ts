import type { z } from "zod";

/** Start-up configuration that failed validation; lists every problem, not just the first. */
export class ConfigError extends Error {
  readonly code = "invalid_config";
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid configuration:\n  ${problems.join("\n  ")}`);
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/**
 * Parses a service's environment once with its zod schema (defaults and coercion live in the
 * schema) and returns a frozen result; throws {@link ConfigError} naming each bad variable.
 */
export function parseConfig<S extends z.ZodType>(
  schema: S,
  env: Record<string, string | undefined>,
): Readonly<z.output<S>> {
  const result = schema.safeParse(env);
  if (!result.success) {
    throw new ConfigError(
      result.error.issues.map((i) => `${i.path.join(".") || "(env)"}: ${i.message}`),
    );
  }
  return Object.freeze(result.data);
}
