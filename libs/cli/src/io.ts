import { parseArgs } from "node:util";
import type { ParseArgsConfig } from "node:util";
import { readFileSync } from "node:fs";

/** What a command may touch, injected so commands run in-process in tests. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  readFile(path: string): Uint8Array;
  env: Record<string, string | undefined>;
  now(): Date;
}

/** The real process's streams, files, environment and clock. */
export function processIo(): CliIo {
  return {
    stdout: (s) => void process.stdout.write(s),
    stderr: (s) => void process.stderr.write(s),
    readFile: (path) => readFileSync(path),
    env: process.env,
    now: () => new Date(),
  };
}

/** A command-line mistake: printed with the command's usage, exit status 2. */
export class UsageError extends Error {
  readonly code = "usage_error";
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** A failure the user can act on (bad document, unreachable NATS): exit status 1. */
export class CliError extends Error {
  readonly code = "cli_error";
  constructor(message: string) {
    super(message);
    this.name = "CliError";
  }
}

/** `node:util` parseArgs, with a {@link UsageError} (exit code 2) instead of Node's TypeError. */
export function parseCommandArgs<T extends ParseArgsConfig>(
  config: T,
): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
