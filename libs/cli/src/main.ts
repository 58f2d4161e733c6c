#!/usr/bin/env node
// The `zml` binary: runs one command, then exits (a NATS connection still retrying in the
// background must not keep the process alive).
import { processIo } from "./io.ts";
import { runCli } from "./run.ts";

const code = await runCli(process.argv.slice(2), processIo());
process.stderr.write("", () => process.stdout.write("", () => process.exit(code)));
