import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus, ensureBusResources, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { DEFAULT_NODE_APIS, KV_BUCKETS, NodeStateSchema } from "@zml/contracts";
import type {
  CloudAccountSpec,
  FleetDocument,
  NodeApi,
  NodeCloudPlacement,
  NodeSpec,
  NodeStatus,
  PolicySpec,
} from "@zml/contracts";
// The fleet kit's builders; this file's own `chainPolicy` and `nodeSpec` are the e2e flavours.
import { chainPolicy as fleetChainPolicy, nodeSpec as fleetNodeSpec } from "@zml/contracts/testing";
import { applyFleet, parseFleetDocument } from "@zml/fleet";
import { findFreePort, pollUntil, repoRoot, startNatsServer, startProcess } from "@zml/harness";
import type { ManagedProcess, NatsServerHandle } from "@zml/harness";
import { createReportDataQuoter, startSimNode } from "@zml/node-sim";
import type { SimNode, SimNodeOptions } from "@zml/node-sim";
import { simulatedQuoter, startTdProxy } from "@zml/td-proxy";
import type { TdProxy } from "@zml/td-proxy";

export const API_KEY = "e2e-test-key-0123456789";
/** The intake admin API's credential in every stack (`ZML_ADMIN_TOKEN`). */
export const ADMIN_TOKEN = "e2e-7Qf3c9a1B5d2e8F4a6c0b9d7";
export const quietLog = { info() {}, warn() {}, error() {} };

export type SimSpec = Omit<SimNodeOptions, "models" | "flavour"> & {
  family: string;
  flavour?: SimNodeOptions["flavour"];
  models?: string[];
  tier?: number;
  maxConcurrency?: number;
  /** The APIs the node is declared to serve (the simulator serves them all). */
  apis?: NodeApi[];
  /** Declares the node a cloud instance of a registered cloud account. */
  cloud?: NodeCloudPlacement;
  /** The spec's `prefill_tokens_per_second` (what routing assumes until it measures one). */
  prefillTokensPerSecond?: number;
};

export interface StackOptions {
  nodes: SimSpec[];
  /**
   * Nodes that are not simulated (e.g. real llama.cpp servers the test started), added to the
   * fleet after the simulated ones as they are given.
   */
  extraNodes?: NodeSpec[];
  /** Extra fleet sections (policies, models) merged into the generated document. */
  fleet?: Partial<Pick<FleetDocument, "policies" | "models" | "cloud_accounts">>;
  /** Extra environment for every service. */
  env?: Record<string, string>;
  /**
   * The root the attestation service trusts instead of Intel's (its
   * `ATTESTATION_TRUST_ROOT_PEM_FILE`), e.g. the test PKI's; written to a file removed on stop.
   */
  trustedRootPem?: string;
  /** Tiers the test account may use (default 1 and 2). */
  allowedTiers?: number[];
  /** Dispatcher replicas to start (default 1); extra ones are named `dispatcher-2`, …. */
  dispatchers?: number;
  /** nats-server `max_payload` (default the harness's 8MB), e.g. `"1MB"`, NATS's own default. */
  natsMaxPayload?: string;
  /**
   * Runs after the fleet is applied and before the services start, e.g. to fill KV buckets
   * or set a simulated node's fault.
   */
  seed?: (bus: Bus, sims: ReadonlyMap<string, SimNode>) => Promise<void>;
}

export interface Stack {
  intakeUrl: string;
  nats: NatsServerHandle;
  /** Every node's serving framework (for a tier-4 node, the one behind its TD proxy). */
  sims: Map<string, SimNode>;
  /** The TD proxy in front of each tier-4 node (its `endpoint`). */
  tdProxies: Map<string, TdProxy>;
  services: Map<string, ManagedProcess>;
  bus: Bus;
  fleet: FleetDocument;
  /** The file holding `trustedRootPem`, for other clients under test to trust it too. */
  trustedRootPemFile: string | undefined;
  /** Re-applies a changed fleet document (e.g. a new node or policy). */
  apply(doc: FleetDocument): Promise<void>;
  /** Permission violations the server logged: a service asking for more than it is granted. */
  permissionViolations(): string[];
  /** Scans the services' output (their JSON logs). */
  logs(): string;
  /** Stops one service (SIGTERM); `startService` brings it back with the same environment. */
  stopService(name: string): Promise<void>;
  /** Starts a stopped service again and resolves once it reports ready. */
  startService(name: string): Promise<void>;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export const MODEL = "llama-3.1-8b-instruct";

/** A `latency` policy trying `families` in order, failing fast when none has capacity. */
export function chainPolicy(name: string, families: string[]): PolicySpec {
  return fleetChainPolicy(name, families, { latency_target_ms: 2_000 });
}

/** Node spec for a simulated node, as an operator would declare it. */
export function nodeSpec(sim: SimNode, spec: SimSpec, index: number): NodeSpec {
  return fleetNodeSpec(sim.nodeId, {
    endpoint: sim.url,
    framework: spec.flavour ?? "vllm",
    accelerator_family: spec.family,
    tier: spec.tier ?? 1,
    models: spec.models ?? [MODEL],
    apis: spec.apis ?? [...DEFAULT_NODE_APIS],
    max_concurrency: spec.maxConcurrency ?? 16,
    registered_at: index,
    ...(spec.cloud === undefined ? {} : { cloud: spec.cloud }),
    ...(spec.prefillTokensPerSecond === undefined
      ? {}
      : { prefill_tokens_per_second: spec.prefillTokensPerSecond }),
  });
}

/**
 * A whole gateway for a test: a real nats-server, in-process simulated nodes speaking the
 * real wire formats, the fleet applied to KV, and the four services as child processes.
 */
/**
 * Starts one simulated node per spec into `sims`; returns the fleet's node entries. A tier-4
 * TEE node is a plain simulated server on loopback behind a TD proxy (into `tdProxies`),
 * which quotes with the spec's TEE settings: the same TD side a real tier-4 node runs.
 */
export async function startSims(
  specs: SimSpec[],
  sims: Map<string, SimNode>,
  tdProxies: Map<string, TdProxy> = new Map(),
): Promise<NodeSpec[]> {
  const nodes: NodeSpec[] = [];
  for (const [i, spec] of specs.entries()) {
    const { tee, ...plain } = spec;
    const behindTdProxy = spec.tier === 4 && tee !== undefined;
    const sim = await startSimNode({
      ...(behindTdProxy ? plain : spec),
      flavour: spec.flavour ?? "vllm",
      models: spec.models ?? [MODEL],
    });
    sims.set(sim.nodeId, sim);
    if (!behindTdProxy) {
      nodes.push(nodeSpec(sim, spec, i));
      continue;
    }
    const proxy = await startTdProxy({
      backend: sim.url,
      host: "127.0.0.1",
      name: sim.nodeId,
      quoter: simulatedQuoter(createReportDataQuoter(tee)),
      log: quietLog,
    });
    tdProxies.set(sim.nodeId, proxy);
    nodes.push({ ...nodeSpec(sim, spec, i), endpoint: proxy.url });
  }
  return nodes;
}

/** The e2e fleet: the given nodes, one model by default, and the `e2e` account's key. */
export function e2eFleet(
  nodes: NodeSpec[],
  fleet: Pick<Partial<FleetDocument>, "models" | "policies" | "cloud_accounts"> = {},
  allowedTiers: number[] = [1, 2],
): FleetDocument {
  return parseFleetDocument(
    JSON.stringify({
      apiVersion: "zml/v1",
      nodes,
      models: fleet.models ?? [{ id: MODEL }],
      policies: fleet.policies ?? [],
      cloud_accounts: fleet.cloud_accounts ?? ([] satisfies CloudAccountSpec[]),
      accounts: [
        {
          id: "e2e",
          api_key_sha256: [createHash("sha256").update(API_KEY).digest("hex")],
          allowed_tiers: allowedTiers,
        },
      ],
    }),
  );
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const natsLog: string[] = [];
  const nats = await startNatsServer({
    ...(options.natsMaxPayload === undefined ? {} : { maxPayload: options.natsMaxPayload }),
    log: (line) => {
      if (line.includes("Violation")) natsLog.push(line);
    },
  });
  const sims = new Map<string, SimNode>();
  const tdProxies = new Map<string, TdProxy>();
  const services = new Map<string, ManagedProcess>();
  let trustedRootDir: string | undefined;
  const stop = async () => {
    await Promise.allSettled([...services.values()].map((s) => s.stop("SIGTERM", 3_000)));
    await Promise.allSettled([...tdProxies.values()].map((p) => p.close()));
    await Promise.allSettled([...sims.values()].map((s) => s.close()));
    await bus?.drain().catch(() => undefined);
    await nats.stop();
    if (trustedRootDir) await rm(trustedRootDir, { recursive: true, force: true });
    // Every e2e test doubles as a check of the permission table: a service (or the CLI)
    // refused anything while doing its job fails the file that ran it.
    const ours = natsLog.filter((l) => /nats\.js:zml-/.test(l));
    if (ours.length > 0) {
      throw new Error(`services hit permission violations:\n${ours.join("\n")}`);
    }
  };
  let bus: Bus | undefined;
  try {
    const nodes = [
      ...(await startSims(options.nodes, sims, tdProxies)),
      ...(options.extraNodes ?? []),
    ];
    const fleet = e2eFleet(nodes, options.fleet, options.allowedTiers);
    bus = await connectBus({ ...nats.client(), name: "e2e", log: quietLog });
    await ensureBusResources(bus);
    await applyFleet(bus, fleet);

    const intakePort = await findFreePort();
    let trustedRootPemFile: string | undefined;
    if (options.trustedRootPem !== undefined) {
      trustedRootDir = await mkdtemp(join(tmpdir(), "zml-trusted-root-"));
      trustedRootPemFile = join(trustedRootDir, "root.pem");
      await writeFile(trustedRootPemFile, options.trustedRootPem);
    }
    const trust: Record<string, string> = trustedRootPemFile
      ? { ATTESTATION_TRUST_ROOT_PEM_FILE: trustedRootPemFile }
      : {};
    const env = {
      LOG_LEVEL: "info",
      POLL_INTERVAL_MS: "300",
      PROBE_TIMEOUT_MS: "1000",
      ...trust,
      // The sims listen on 127.0.0.1: the operator's allowance for nodes on this host.
      ZML_NODE_ALLOW_LOOPBACK: "true",
      ...options.env,
    };
    const root = repoRoot();
    const specs: Array<[string, Record<string, string>]> = [
      ["health-aggregator", { AGGREGATOR_OPS_PORT: "0" }],
      ["attestation", { ATTESTATION_OPS_PORT: "0" }],
      ["dispatcher", { DISPATCHER_OPS_PORT: "0" }],
      ...Array.from(
        { length: (options.dispatchers ?? 1) - 1 },
        (_, i): [string, Record<string, string>] => [
          `dispatcher-${i + 2}`,
          { DISPATCHER_OPS_PORT: "0" },
        ],
      ),
      [
        "intake",
        {
          ZML_PORT: String(intakePort),
          ZML_HOST: "127.0.0.1",
          ZML_ADMIN_TOKEN: ADMIN_TOKEN,
          ...(nats.secure
            ? { ZML_ADMIN_NATS_NKEY_SEED_FILE: nats.client("admin").nkeySeedFile! }
            : {}),
        },
      ],
    ];
    await options.seed?.(bus, sims);
    const startService = async (name: string) => {
      const extra = specs.find(([n]) => n === name)?.[1];
      if (extra === undefined) throw new Error(`no service ${name}`);
      const service = name.replace(/-\d+$/, "");
      const proc = await startProcess({
        name,
        command: process.execPath,
        args: [join(root, `services/${service}/src/main.ts`)],
        // Each service runs as its own bus identity, as in production.
        env: { ...nats.serviceEnv(service), ...env, ...extra },
        readyLine: /"msg":"[a-z-]+ ready"/,
        readyTimeoutMs: 30_000,
      });
      services.set(name, proc);
    };
    await Promise.all(specs.map(([name]) => startService(name)));
    const intakeUrl = `http://127.0.0.1:${intakePort}`;
    const stack: Stack = {
      intakeUrl,
      nats,
      sims,
      tdProxies,
      services,
      bus,
      fleet,
      trustedRootPemFile,
      apply: async (doc) => {
        await applyFleet(bus!, doc);
      },
      permissionViolations: () => [...natsLog],
      logs: () => [...services.values()].map((s) => s.output()).join("\n"),
      stopService: async (name) => {
        await services.get(name)?.stop("SIGTERM", 3_000);
        services.delete(name);
      },
      startService,
      stop,
      [Symbol.asyncDispose]: stop,
    };
    return stack;
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * {@link startStack}, resolving once the health aggregator has published every node Active:
 * a stack ready to route. Stopped again if the nodes never get there.
 */
export async function startActiveStack(options: StackOptions): Promise<Stack> {
  const stack = await startStack(options);
  try {
    await waitForStatus(stack, "Active");
  } catch (error) {
    // Stopping checks for permission violations: report what it finds beside the timeout.
    await stack.stop().catch((stopError: unknown) => {
      throw new AggregateError([error, stopError], "nodes never Active, and stopping failed");
    });
    throw error;
  }
  return stack;
}

/** The status the health aggregator last published for a node, read from the KV snapshot. */
export async function nodeStatus(stack: Stack, nodeId: string): Promise<NodeStatus | undefined> {
  const kv = await openKv(stack.bus, KV_BUCKETS.nodeState);
  const e = await kv.get(nodeId);
  return e?.operation === "PUT" ? NodeStateSchema.parse(e.json()).status : undefined;
}

/** Waits until the given nodes (default: all) are Active in the published node state. */
export async function waitForStatus(
  stack: Stack,
  status: NodeStatus,
  nodeIds: string[] = [...stack.sims.keys()],
): Promise<void> {
  await pollUntil(
    async () => {
      for (const id of nodeIds) if ((await nodeStatus(stack, id)) !== status) return false;
      return true;
    },
    { timeoutMs: 15_000, message: `${nodeIds.join(", ")} ${status}` },
  );
}

export function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    model: MODEL,
    messages: [{ role: "user", content: "Say hello" }],
    ...extra,
  });
}

export function adminHeaders(token = ADMIN_TOKEN): Record<string, string> {
  return { authorization: `Bearer ${token}`, "content-type": "application/json" };
}

export function authHeaders(key = API_KEY): Record<string, string> {
  return { authorization: `Bearer ${key}`, "content-type": "application/json" };
}
