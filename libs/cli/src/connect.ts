import { connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { inboxPrefixOf } from "@zml/contracts";
import { CliError } from "./io.ts";
import type { CliIo } from "./io.ts";

const quiet = { info() {}, warn() {}, error() {} };

/** How long to wait for NATS before giving up (the bus itself would retry forever). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Connects to NATS at `--nats`, else `NATS_URL`, else `nats://127.0.0.1:4222`, as the
 * `admin` identity whose seed is in `NATS_NKEY_SEED_FILE`, verifying the server with
 * `NATS_CA_FILE` (`NATS_TOKEN` when set). The CLI talks to the configuration buckets
 * directly, like every other operator of the bus; no gateway needs to be running. Like the
 * services, it refuses a bus that accepts anonymous clients unless `NATS_INSECURE=1`.
 */
export async function connectCli(url: string | undefined, io: CliIo): Promise<Bus> {
  const servers = url ?? io.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const token = io.env.NATS_TOKEN;
  const seed = io.env.NATS_NKEY_SEED_FILE;
  const ca = io.env.NATS_CA_FILE;
  const replicas = replicasOf(io.env.NATS_REPLICAS);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new CliError(`cannot reach NATS at ${servers}`)),
      CONNECT_TIMEOUT_MS,
    );
  });
  try {
    return await Promise.race([
      connectBus({
        servers,
        name: "zml-cli",
        log: quiet,
        inboxPrefix: inboxPrefixOf("admin"),
        insecure: /^(1|true|yes)$/.test(io.env.NATS_INSECURE ?? ""),
        ...(token ? { token } : {}),
        ...(seed ? { nkeySeedFile: seed } : {}),
        ...(ca ? { caFile: ca } : {}),
        ...(replicas !== undefined ? { replicas } : {}),
      }),
      timeout,
    ]);
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`cannot connect to NATS at ${servers}: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
}

/** `NATS_REPLICAS`: copies of every stream and bucket `zml apply` sets up (1–5). */
function replicasOf(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 5) {
    throw new CliError(`NATS_REPLICAS must be a whole number from 1 to 5, got '${value}'`);
  }
  return n;
}

/** Runs `fn` with a connected bus and drains it afterwards, whatever `fn` does. */
export async function withBus<T>(
  url: string | undefined,
  io: CliIo,
  fn: (bus: Bus) => Promise<T>,
): Promise<T> {
  const bus = await connectCli(url, io);
  try {
    return await fn(bus);
  } finally {
    await bus.drain();
  }
}
