import { runVerifyQuoteCommand } from "../src/index.ts";

/** Runs `zml verify-quote` over in-memory files, capturing what it prints. */
export function runCommand(
  files: Record<string, Uint8Array>,
  argv: string[],
  now?: string,
): { code: number; stdout: string; stderr: string } {
  let stdout = "";
  let stderr = "";
  const code = runVerifyQuoteCommand(argv, {
    stdout: (s) => (stdout += s),
    stderr: (s) => (stderr += s),
    readFile: (path) => {
      const file = files[path];
      if (!file) throw new Error(`ENOENT: ${path}`);
      return file;
    },
    ...(now === undefined ? {} : { now: () => new Date(now) }),
  });
  return { code, stdout, stderr };
}
