// Stand-alone entry: `node libs/tdx/src/cli.ts verify-quote <file> [...]`.
import { readFileSync } from "node:fs";
import { runVerifyQuoteCommand } from "./verify-quote-command.ts";

const [command, ...args] = process.argv.slice(2);
if (command !== "verify-quote") {
  process.stderr.write("usage: cli.ts verify-quote <quote-file> [options] (--help for options)\n");
  process.exitCode = 2;
} else {
  process.exitCode = runVerifyQuoteCommand(args, {
    stdout: (s) => process.stdout.write(s),
    stderr: (s) => process.stderr.write(s),
    readFile: (path) => readFileSync(path),
  });
}
