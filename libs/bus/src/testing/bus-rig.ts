// A real nats-server and one bus connection to it as the test's driver: what a test of
// anything that talks to the bus starts with. The server comes from @zml/harness (a dev
// dependency of every package that imports this); it lives here rather than in the harness
// because the harness cannot depend on this package, whose own tests use the harness.
import { startNatsServer } from "@zml/harness";
import type { NatsServerHandle, StartNatsServerOptions } from "@zml/harness";
import { ensureBusResources } from "../bus-resources.ts";
import { connectBus } from "../connection.ts";
import type { Bus, BusLogger } from "../connection.ts";

const silentLog: BusLogger = { info() {}, warn() {}, error() {} };

/** The server's options, less its log and security: a rig's server is secured, as production's. */
export interface StartBusRigOptions extends Omit<StartNatsServerOptions, "log" | "security"> {
  /** The connection's name, as the server's logs and monitoring show it. */
  name: string;
  /** Default: silent. */
  log?: BusLogger;
  /**
   * Create every KV bucket and job stream first, as `zml apply` does on a new bus (default
   * false: a test that needs a bucket opens it, or proves a service cannot).
   */
  createResources?: boolean;
}

export interface BusRig extends AsyncDisposable {
  nats: NatsServerHandle;
  /**
   * Connected as the harness identity, which may do anything: a test driver's view of the
   * bus, not a service's (`nats.client(identity)` gives a service's own options).
   */
  bus: Bus;
  /** Drains the connection, then stops the server. */
  stop(): Promise<void>;
}

/** Starts a secured nats-server and connects to it. */
export async function startBusRig(options: StartBusRigOptions): Promise<BusRig> {
  const { name, log = silentLog, createResources = false, ...server } = options;
  const nats = await startNatsServer(server);
  let bus: Bus | undefined;
  // A failed drain still fails the test, but never leaves the server running.
  const stop = async () => {
    try {
      await bus?.drain();
    } finally {
      await nats.stop();
    }
  };
  try {
    bus = await connectBus({ ...nats.client(), name, log });
    if (createResources) await ensureBusResources(bus);
    return { nats, bus, stop, [Symbol.asyncDispose]: stop };
  } catch (error) {
    await stop().catch(() => undefined); // the first error is the one to see
    throw error;
  }
}
