export { runCli, USAGE } from "./run.ts";
export { processIo, UsageError, CliError } from "./io.ts";
export type { CliIo } from "./io.ts";
export { formatTable } from "./table.ts";
