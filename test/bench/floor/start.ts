import { join } from "node:path";
import { SERVICE_NODE_FLAGS, serviceRuntimeEnv, startProcess } from "@zml/harness";
import type { ManagedProcess, NatsServerHandle } from "@zml/harness";
import { FLOOR_INTAKE, FLOOR_WORKER } from "./protocol.ts";

/** The floor's two processes, started as ZML's services are (same Node flags, same malloc). */
export interface Floor {
  url: string;
  intake: ManagedProcess;
  worker: ManagedProcess;
  stop(): Promise<void>;
}

/**
 * Starts the floor on `nats` in front of `nodeUrls` (request paths name them by index).
 * `envOf(identity)` adds to a process's environment (the bench's `--profile floor-intake`).
 */
export async function startFloor(
  nats: NatsServerHandle,
  nodeUrls: readonly string[],
  compileCacheDir: string,
  envOf: (identity: string) => Record<string, string>,
): Promise<Floor> {
  const start = (name: string, identity: string, extra: Record<string, string>) =>
    startProcess({
      name: identity,
      command: process.execPath,
      args: [...SERVICE_NODE_FLAGS, join(import.meta.dirname, `${name}.ts`)],
      env: {
        ...serviceRuntimeEnv(compileCacheDir),
        ...nats.serviceEnv(identity),
        ...extra,
        ...envOf(identity),
      },
      readyLine: /"event":"ready"/,
    });
  const worker = await start("worker", FLOOR_WORKER, { FLOOR_NODES: JSON.stringify(nodeUrls) });
  let intake: ManagedProcess;
  try {
    intake = await start("intake", FLOOR_INTAKE, {});
  } catch (error) {
    await worker.stop("SIGTERM", 3_000);
    throw error;
  }
  const ready = await intake.waitForOutput(/"url":"([^"]+)"/);
  return {
    url: ready[1]!,
    intake,
    worker,
    async stop() {
      await Promise.allSettled([intake.stop("SIGTERM", 3_000), worker.stop("SIGTERM", 3_000)]);
    },
  };
}
