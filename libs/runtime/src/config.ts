import { readFileSync } from "node:fs";
import type { z } from "zod";

/** One bad setting: which one, what is wrong with it, and what the operator should do. */
export interface ConfigProblem {
  /** The environment variable (or file) at fault, e.g. `ZML_ADMIN_TOKEN`. */
  setting: string;
  problem: string;
  fix: string;
}

/** Start-up configuration that failed validation; lists every problem, not just the first. */
export class ConfigError extends Error {
  readonly code = "invalid_config";
  readonly problems: ConfigProblem[];
  constructor(problems: ConfigProblem[]) {
    super(
      `invalid configuration:\n  ${problems.map((p) => `${p.setting}: ${p.problem}`).join("\n  ")}`,
    );
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/** What to do about a bad setting, keyed by variable name; a generic hint covers the rest. */
export type ConfigFixes = Readonly<Record<string, string>>;

/**
 * Parses a service's environment once with its zod schema (defaults and coercion live in the
 * schema) and returns a frozen result; throws {@link ConfigError} naming each bad variable,
 * with the fix from `fixes` where one is given.
 */
export function parseConfig<S extends z.ZodType>(
  schema: S,
  env: Record<string, string | undefined>,
  fixes: ConfigFixes = {},
): Readonly<z.output<S>> {
  const result = schema.safeParse(env);
  if (!result.success) {
    throw new ConfigError(
      result.error.issues.map((issue) => {
        // The variable is the first path element; deeper ones locate a part of its value.
        const [first, ...rest] = issue.path.map(String);
        const setting = first ?? "(environment)";
        const value = first === undefined ? undefined : env[first];
        const where = rest.length > 0 ? `item ${rest.join(".")}: ` : "";
        return {
          setting,
          problem: `${where}${issue.message}`,
          fix:
            fixes[setting] ??
            (value === undefined
              ? `set ${setting}`
              : `correct ${setting}, or unset it to use the default`),
        };
      }),
    );
  }
  return Object.freeze(result.data);
}

/** A message for a person: which setting, what is wrong, what to do. No stack trace. */
export function formatConfigError(service: string, error: ConfigError): string {
  const lines = [`${service}: cannot start, the configuration is invalid:`];
  for (const p of error.problems) {
    lines.push(`  ${p.setting}: ${p.problem}`, `    → ${p.fix}`);
  }
  return `${lines.join("\n")}\n`;
}

/** Exit status for a configuration error (sysexits' EX_CONFIG), apart from crashes (1). */
export const CONFIG_ERROR_EXIT_CODE = 78;

/**
 * Installs the start-up error reporter of a service's composition root: a {@link ConfigError}
 * thrown anywhere (top-level await included) prints {@link formatConfigError} to stderr and
 * exits with {@link CONFIG_ERROR_EXIT_CODE}; anything else is printed with its stack and exits 1,
 * as Node would. Call it first thing in `main.ts`.
 */
export function reportStartupErrors(service: string): void {
  process.on("uncaughtException", (error) => {
    if (error instanceof ConfigError) {
      process.stderr.write(formatConfigError(service, error));
      process.exit(CONFIG_ERROR_EXIT_CODE);
    }
    process.stderr.write(`${service}: ${error.stack ?? String(error)}\n`);
    process.exit(1);
  });
}

/**
 * Reads a file that a setting names, once at start-up; an unreadable file is a
 * {@link ConfigError} on that setting rather than an `ENOENT` stack trace.
 */
export function readConfigFile(setting: string, path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new ConfigError([
      {
        setting,
        problem: `cannot read ${path} (${reason})`,
        fix: `point ${setting} at a readable ${what}, or unset it`,
      },
    ]);
  }
}

/** A {@link ConfigError} about one setting whose value was read but is unusable. */
export function configProblem(setting: string, problem: string, fix: string): ConfigError {
  return new ConfigError([{ setting, problem, fix }]);
}
