import { runVerifyQuoteCommand } from "@zml/tdx";
import { APPLY_USAGE, runApply } from "./commands/apply.ts";
import { BUS_CREDENTIALS_USAGE, runBusCredentials } from "./commands/bus-credentials.ts";
import { GET_USAGE, runGet } from "./commands/get.ts";
import { REVOKE_USAGE, runRevoke } from "./commands/revoke.ts";
import { runSealProxy, SEAL_PROXY_USAGE } from "./commands/seal-proxy.ts";
import { CliError, UsageError } from "./io.ts";
import type { CliIo } from "./io.ts";
import { closest } from "./suggest.ts";

export const USAGE = `usage: zml <command> [options]

commands:
  apply -f <fleet.yaml>     apply a fleet document to NATS KV (shows the changes; idempotent)
  get <kind>                list nodes, policies, models, accounts or revocations, with live state
  revoke <id> …             add (or --withdraw) a revocation-list entry
  verify-quote <file> …     verify an Intel TDX quote offline
  seal-proxy --model <m> …  a local OpenAI endpoint that seals to a verified tier-4 session
  bus-credentials --out <dir>  generate the bus identities and nats-server authorization

Run 'zml <command> --help' for a command's options. NATS: --nats <url>, $NATS_URL, and the
admin identity's $NATS_NKEY_SEED_FILE and $NATS_CA_FILE.
`;

const COMMANDS: Record<
  string,
  { run: (args: string[], io: CliIo) => Promise<number>; usage: string }
> = {
  apply: { run: runApply, usage: APPLY_USAGE },
  get: { run: runGet, usage: GET_USAGE },
  revoke: { run: runRevoke, usage: REVOKE_USAGE },
  "bus-credentials": { run: runBusCredentials, usage: BUS_CREDENTIALS_USAGE },
  "seal-proxy": { run: runSealProxy, usage: SEAL_PROXY_USAGE },
};

/**
 * Runs the `zml` CLI with the arguments after the program name and returns the exit
 * status: 0 success, 1 failure (invalid document, unreachable NATS, quote not verified),
 * 2 usage error.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [command, ...args] = argv;
  if (command === undefined || command === "help" || command === "--help" || command === "-h") {
    io.stdout(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === "verify-quote") return runVerifyQuoteCommand(args, io);
  const entry = COMMANDS[command];
  if (!entry) {
    const guess = closest(command, [...Object.keys(COMMANDS), "verify-quote", "help"]);
    const hint = guess === undefined ? "" : `; did you mean '${guess}'?`;
    io.stderr(`zml: unknown command '${command}'${hint}\n\n${USAGE}`);
    return 2;
  }
  try {
    return await entry.run(args, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr(`zml ${command}: ${err.message}\n\n${entry.usage}`);
      return 2;
    }
    if (err instanceof CliError) {
      io.stderr(`zml ${command}: ${err.message}\n`);
      return 1;
    }
    io.stderr(`zml ${command}: ${(err as Error).message}\n`);
    return 1;
  }
}
