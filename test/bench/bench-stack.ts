// The gateway under benchmark: its own nats-server, simulated nodes as separate processes
// (so that they never compete with the coordinator's event loop), the fleet applied to KV and
// the four services as child processes logging at `warn`.
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { connectBus, ensureBusResources } from "@zml/bus";
import type { Bus } from "@zml/bus";
import type { NodeSpec } from "@zml/contracts";
import { applyFleet, parseFleetDocument } from "@zml/fleet";
import {
  createTestCertificate,
  findFreePort,
  pollUntil,
  repoRoot,
  SERVICE_NODE_FLAGS,
  serviceCompileCacheDir,
  serviceRuntimeEnv,
  startNatsServer,
  startProcess,
  warmCompileCache,
} from "@zml/harness";
import type {
  ManagedProcess,
  NatsClientOptions,
  NatsServerHandle,
  TestCertificate,
} from "@zml/harness";
import { request } from "undici";
import { childPidByName } from "./proc.ts";

export const BENCH_API_KEY = "bench-key-0123456789abcdef";

/** One simulated node; each serves its own model so the gateway routes only to it. */
export interface BenchNodeSpec {
  model: string;
  ttftMs?: number;
  tokensPerSecond?: number;
  completionTokens?: number;
  /** Declared in the node's spec and served by the simulator; default HTTP/1.1. */
  protocol?: "h2c" | "h2";
}

export interface BenchNode {
  model: string;
  url: string;
  protocol?: "h2c" | "h2";
  process: ManagedProcess;
}

export interface BenchStack {
  intakeUrl: string;
  nodes: Map<string, BenchNode>;
  /** intake, dispatcher, health-aggregator, attestation. */
  services: Map<string, ManagedProcess>;
  /** Base URL of each service's `/readyz` and `/metrics`. */
  opsUrls: Map<string, string>;
  natsPid: number | undefined;
  /** How the benchmark itself connects (the harness identity: it also reads results). */
  natsDriver: NatsClientOptions;
  /** The certificate `h2` nodes present (for 127.0.0.1), when there are any. */
  caPem?: string;
  stop(): Promise<void>;
}

export interface BenchStackOptions {
  nodes: BenchNodeSpec[];
  /** Services run with `--cpu-prof`, each writing its profile under `profileDir/<service>`. */
  profile?: { services: string[]; dir: string };
  /**
   * Services run with `alloc-probe.ts`, each appending to `dir/<service>.jsonl` the bytes it
   * allocated between two SIGUSR2 (see `allocation.ts`).
   */
  alloc?: { services: string[]; dir: string };
  /** Extra environment for the four services (an optional feature's settings). */
  serviceEnv?: Record<string, string>;
}

const quietLog = { info() {}, warn() {}, error() {} };
// Far above any benchmark's concurrency: neither the node nor the dispatcher ever queues.
const NODE_CAPACITY = 4096;

export async function startBenchStack(options: BenchStackOptions): Promise<BenchStack> {
  const root = repoRoot();
  // Always a fresh server of our own, never a shared one from NATS_URL.
  const nats: NatsServerHandle = await startNatsServer({
    env: { ...process.env, NATS_URL: undefined },
  });
  const nodes = new Map<string, BenchNode>();
  const services = new Map<string, ManagedProcess>();
  let bus: Bus | undefined;
  // h2 nodes present one certificate for 127.0.0.1, which the services are told to trust.
  const tls = options.nodes.some((n) => n.protocol === "h2") ? createTestCertificate() : undefined;
  const stop = async () => {
    // SIGTERM and a long grace: profiled services write their profile on a clean exit.
    await Promise.allSettled([...services.values()].map((s) => s.stop("SIGTERM", 10_000)));
    await Promise.allSettled([...nodes.values()].map((n) => n.process.stop("SIGTERM", 3_000)));
    await bus?.drain().catch(() => undefined);
    await nats.stop();
    tls?.dispose();
  };
  try {
    const specs: NodeSpec[] = [];
    await Promise.all(
      options.nodes.map(async (spec, i) => {
        const node = await startSimNodeProcess(root, spec, tls);
        nodes.set(spec.model, node);
        specs[i] = {
          id: spec.model,
          endpoint: node.url,
          framework: "vllm",
          accelerator_family: "H100",
          tier: 1,
          models: [spec.model],
          apis: ["chat", "completions"],
          max_concurrency: NODE_CAPACITY,
          health_path: "/health",
          metrics_path: "/metrics",
          registered_at: i,
          ...(spec.protocol === undefined ? {} : { protocol: spec.protocol }),
        };
      }),
    );
    const fleet = parseFleetDocument(
      JSON.stringify({
        apiVersion: "zml/v1",
        nodes: specs,
        models: options.nodes.map((n) => ({ id: n.model })),
        accounts: [
          {
            id: "bench",
            api_key_sha256: [createHash("sha256").update(BENCH_API_KEY).digest("hex")],
            allowed_tiers: [1],
          },
        ],
      }),
    );
    bus = await connectBus({ ...nats.client(), name: "zml-bench", log: quietLog });
    await ensureBusResources(bus);
    await applyFleet(bus, fleet);

    const env = {
      LOG_LEVEL: "warn",
      POLL_INTERVAL_MS: "2000",
      ...(tls ? { NODE_EXTRA_CA_CERTS: tls.certPath } : {}),
      ...options.serviceEnv,
    };
    const [intakePort, dispatcherOps, aggregatorOps, attestationOps] = await Promise.all([
      findFreePort(),
      findFreePort(),
      findFreePort(),
      findFreePort(),
    ]);
    // Each service serves /readyz and /metrics on this port (intake on its API port).
    const serviceSpecs: Array<[string, Record<string, string>, number]> = [
      ["health-aggregator", { AGGREGATOR_OPS_PORT: String(aggregatorOps) }, aggregatorOps],
      ["attestation", { ATTESTATION_OPS_PORT: String(attestationOps) }, attestationOps],
      ["dispatcher", { DISPATCHER_OPS_PORT: String(dispatcherOps) }, dispatcherOps],
      ["intake", { ZML_PORT: String(intakePort), ZML_HOST: "127.0.0.1" }, intakePort],
    ];
    const opsUrls = new Map(
      serviceSpecs.map(([name, , port]) => [name, `http://127.0.0.1:${port}`]),
    );
    // Run as deployed (libs/harness "service-flags"): a cold cache would load the TypeScript
    // stripper into every service for its whole life and skew the memory figures.
    const compileCache = serviceCompileCacheDir(root);
    await warmCompileCache(
      root,
      serviceSpecs.map(([name]) => name),
      compileCache,
    );
    await Promise.all(
      serviceSpecs.map(async ([name, extra]) => {
        const proc = await startProcess({
          name,
          command: process.execPath,
          args: [...SERVICE_NODE_FLAGS, join(root, `services/${name}/src/main.ts`)],
          env: {
            ...serviceRuntimeEnv(compileCache),
            ...nats.serviceEnv(name),
            ...env,
            ...extra,
            ...probeEnv(options, name),
          },
          readyUrl: `${opsUrls.get(name)}/readyz`,
          readyTimeoutMs: 30_000,
        });
        services.set(name, proc);
      }),
    );
    const intakeUrl = `http://127.0.0.1:${intakePort}`;
    try {
      await waitUntilRoutable(intakeUrl, [...nodes.keys()]);
    } catch (error) {
      const logs = [...services.values()]
        .map((s) => `--- ${s.name}\n${s.output().split("\n").slice(-15).join("\n")}`)
        .join("\n");
      throw new Error(`${(error as Error).message}\nservice output:\n${logs}`, { cause: error });
    }
    return {
      intakeUrl,
      nodes,
      services,
      opsUrls,
      natsPid: childPidByName("nats-server"),
      natsDriver: nats.client(),
      ...(tls ? { caPem: tls.cert.toString("utf8") } : {}),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The Node options that load the CPU profiler or the allocation probe into a service. */
function probeEnv(options: BenchStackOptions, service: string): Record<string, string> {
  const nodeOptions: string[] = [];
  const env: Record<string, string> = {};
  if (options.profile?.services.includes(service)) {
    const dir = join(options.profile.dir, service);
    mkdirSync(dir, { recursive: true });
    nodeOptions.push("--cpu-prof", `--cpu-prof-dir=${dir}`);
  }
  if (options.alloc?.services.includes(service)) {
    mkdirSync(options.alloc.dir, { recursive: true });
    env.ZML_BENCH_ALLOC_FILE = allocFileOf(options.alloc.dir, service);
    rmSync(env.ZML_BENCH_ALLOC_FILE, { force: true });
    nodeOptions.push(`--import=${join(repoRoot(), "test/bench/alloc-probe.ts")}`);
  }
  return nodeOptions.length > 0 ? { ...env, NODE_OPTIONS: nodeOptions.join(" ") } : env;
}

/** Where a service's allocation probe writes (see `BenchStackOptions.alloc`). */
export function allocFileOf(dir: string, service: string): string {
  return join(dir, `${service}.jsonl`);
}

async function startSimNodeProcess(
  root: string,
  spec: BenchNodeSpec,
  tls: TestCertificate | undefined,
): Promise<BenchNode> {
  const args = [
    join(root, "libs/node-sim/src/cli.ts"),
    ...["--id", spec.model, "--model", spec.model],
    ...["--max-concurrency", String(NODE_CAPACITY)],
    ...["--ttft-ms", String(spec.ttftMs ?? 0), "--tps", String(spec.tokensPerSecond ?? 0)],
    ...["--completion-tokens", String(spec.completionTokens ?? 16)],
    ...(spec.protocol === undefined ? [] : ["--protocol", spec.protocol]),
    ...(spec.protocol === "h2" && tls
      ? ["--tls-key-file", tls.keyPath, "--tls-cert-file", tls.certPath]
      : []),
  ];
  const proc = await startProcess({
    name: `node ${spec.model}`,
    command: process.execPath,
    args,
    readyLine: /"event":"ready"/,
  });
  const ready = await proc.waitForOutput(/"url":"([^"]+)"/);
  return {
    model: spec.model,
    url: ready[1]!,
    ...(spec.protocol === undefined ? {} : { protocol: spec.protocol }),
    process: proc,
  };
}

/** Polls each model through the gateway until it answers 200 (its node is Active). */
async function waitUntilRoutable(intakeUrl: string, models: string[]): Promise<void> {
  for (const model of models) {
    let last = "no answer";
    try {
      await pollUntil(
        async () => {
          const res = await request(`${intakeUrl}/v1/chat/completions`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${BENCH_API_KEY}`,
              "content-type": "application/json",
            },
            body: JSON.stringify({ model, messages: [{ role: "user", content: "ready?" }] }),
          });
          last = `${res.statusCode} ${(await res.body.text()).slice(0, 300)}`;
          return res.statusCode === 200;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
    } catch (error) {
      throw new Error(`the gateway did not route model ${model} in time; last answer: ${last}`, {
        cause: error,
      });
    }
  }
}
