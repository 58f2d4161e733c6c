import { connectBus } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { CliError } from "./io.ts";
import type { CliIo } from "./io.ts";

const quiet = { info() {}, warn() {}, error() {} };

/** How long to wait for NATS before giving up (the bus itself would retry forever). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Connects to NATS at `--nats`, else `NATS_URL`, else `nats://127.0.0.1:4222`, with
 * `NATS_TOKEN` when set. The CLI talks to the configuration buckets directly, like every
 * other operator of the bus; no gateway needs to be running.
 */
export async function connectCli(url: string | undefined, io: CliIo): Promise<Bus> {
  const servers = url ?? io.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const token = io.env.NATS_TOKEN;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new CliError(`cannot reach NATS at ${servers}`)),
      CONNECT_TIMEOUT_MS,
    );
  });
  try {
    return await Promise.race([
      connectBus({ servers, name: "zml-cli", log: quiet, ...(token ? { token } : {}) }),
      timeout,
    ]);
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`cannot connect to NATS at ${servers}: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
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
