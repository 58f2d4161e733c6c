import { join } from "node:path";
import { connectBus, ensureBusResources } from "@zml/bus";
import type { Bus } from "@zml/bus";
import type { FleetDocument, NodeSpec } from "@zml/contracts";
import { applyFleet } from "@zml/fleet";
import { findFreePort, repoRoot, startNatsCluster, startProcess } from "@zml/harness";
import type { ManagedProcess, NatsClusterHandle } from "@zml/harness";
import type { SimNode } from "@zml/node-sim";
import { ADMIN_TOKEN, e2eFleet, quietLog, startSims } from "./stack.ts";
import type { SimSpec } from "./stack.ts";

export type ClusterService = (typeof SERVICES)[number];

export interface ClusterStackOptions {
  nodes: SimSpec[];
  /** Nodes the test serves itself (e.g. one that counts what it runs), added to the fleet. */
  ownNodes?: NodeSpec[];
  /** Replicas of each service (default 2). */
  replicas?: number;
  /** Replicas of some services, instead of `replicas`. */
  replicasOf?: Partial<Record<ClusterService, number>>;
  /** Extra environment for every service. */
  env?: Record<string, string>;
}

export interface ClusterStack {
  cluster: NatsClusterHandle;
  /** One URL per intake replica. */
  intakeUrls: string[];
  sims: Map<string, SimNode>;
  /** By name: `intake-1`, `dispatcher-2`, …. */
  services: Map<string, ManagedProcess>;
  /** The harness's own connection (allowed everything), for seeding and inspection. */
  bus: Bus;
  fleet: FleetDocument;
  /** Starts a service replica that was not started (or was killed), with extra env. */
  startService(
    name: string,
    extra?: Record<string, string>,
    ready?: boolean,
  ): Promise<ManagedProcess>;
  /** Permission violations any server logged for a service identity. */
  permissionViolations(): string[];
  logs(): string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const SERVICES = ["health-aggregator", "attestation", "dispatcher", "intake"] as const;

/**
 * The whole gateway on a 3-node NATS cluster: every service as `replicas` child processes,
 * each on its own bus identity with every server in its `NATS_URL`, every stream and bucket
 * R3 (the default on a cluster), and simulated nodes on loopback.
 */
export async function startClusterStack(options: ClusterStackOptions): Promise<ClusterStack> {
  const violations: string[] = [];
  const cluster = await startNatsCluster({
    env: { PATH: process.env.PATH },
    log: (server, line) => {
      if (line.includes("Violation")) violations.push(`${server}: ${line}`);
    },
  });
  const sims = new Map<string, SimNode>();
  const services = new Map<string, ManagedProcess>();
  let bus: Bus | undefined;
  const stop = async () => {
    await Promise.allSettled([...services.values()].map((s) => s.stop("SIGTERM", 3_000)));
    await Promise.allSettled([...sims.values()].map((s) => s.close()));
    await bus?.drain().catch(() => undefined);
    await cluster.stop();
    const ours = violations.filter((l) => /nats\.js:zml-/.test(l));
    if (ours.length > 0) throw new Error(`services hit permission violations:\n${ours.join("\n")}`);
  };
  try {
    const fleet = e2eFleet([
      ...(await startSims(options.nodes, sims)),
      ...(options.ownNodes ?? []),
    ]);
    bus = await connectBus({ ...cluster.client(), name: "e2e-cluster", log: quietLog });
    await ensureBusResources(bus);
    await applyFleet(bus, fleet);

    const replicasOf = (service: ClusterService) =>
      options.replicasOf?.[service] ?? options.replicas ?? 2;
    const intakePorts = await Promise.all(
      Array.from({ length: replicasOf("intake") }, () => findFreePort()),
    );
    const env = {
      LOG_LEVEL: "info",
      POLL_INTERVAL_MS: "300",
      PROBE_TIMEOUT_MS: "1000",
      // The sims listen on 127.0.0.1: the operator's allowance for nodes on this host.
      ZML_NODE_ALLOW_LOOPBACK: "true",
      ...options.env,
    };
    const extraFor = (service: string, replica: number): Record<string, string> => {
      switch (service) {
        case "health-aggregator":
          return { AGGREGATOR_OPS_PORT: "0" };
        case "attestation":
          return { ATTESTATION_OPS_PORT: "0" };
        case "dispatcher":
          return { DISPATCHER_OPS_PORT: "0" };
        default:
          return {
            ZML_PORT: String(intakePorts[replica - 1] ?? 0),
            ZML_HOST: "127.0.0.1",
            ZML_ADMIN_TOKEN: ADMIN_TOKEN,
            ZML_ADMIN_NATS_NKEY_SEED_FILE: cluster.client("admin").nkeySeedFile!,
          };
      }
    };
    const root = repoRoot();
    const startService = async (name: string, extra: Record<string, string> = {}, ready = true) => {
      const match = /^(.+)-(\d+)$/.exec(name);
      if (!match || !(SERVICES as readonly string[]).includes(match[1]!)) {
        throw new Error(`no service ${name}`);
      }
      const service = match[1]!;
      const proc = await startProcess({
        name,
        command: process.execPath,
        args: [join(root, `services/${service}/src/main.ts`)],
        env: {
          ...cluster.serviceEnv(service),
          ...env,
          ...extraFor(service, Number(match[2])),
          ...extra,
        },
        ...(ready ? { readyLine: /"msg":"[a-z-]+ ready"/, readyTimeoutMs: 60_000 } : {}),
      });
      services.set(name, proc);
      return proc;
    };
    const names = SERVICES.flatMap((s) =>
      Array.from({ length: replicasOf(s) }, (_, i) => `${s}-${i + 1}`),
    );
    await Promise.all(names.map((name) => startService(name)));
    const stack: ClusterStack = {
      cluster,
      intakeUrls: intakePorts.map((p) => `http://127.0.0.1:${p}`),
      sims,
      services,
      bus,
      fleet,
      startService,
      permissionViolations: () => [...violations],
      logs: () => [...services.values()].map((s) => s.output()).join("\n"),
      stop,
      [Symbol.asyncDispose]: stop,
    };
    return stack;
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}
