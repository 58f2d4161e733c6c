// The gateway under benchmark: its own nats-server, simulated nodes as separate processes
// (so that they never compete with the coordinator's event loop), the fleet applied to KV and
// the four services as child processes logging at `warn`.
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus, encodeJson, ensureBusResources, openKv } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { ApprovedMeasurementSchema, KV_BUCKETS } from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
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
import { loadTestTeeMaterial } from "@zml/node-sim";
import { request } from "undici";
import { startFloor } from "./floor/start.ts";
import type { Floor } from "./floor/start.ts";
import { FLOOR_IDENTITIES, floorPath } from "./floor/protocol.ts";
import { childPidsByName } from "./proc.ts";

export const BENCH_API_KEY = "bench-key-0123456789abcdef";

/** One simulated node; each serves its own model so the gateway routes only to it. */
export interface BenchNodeSpec {
  model: string;
  ttftMs?: number;
  tokensPerSecond?: number;
  completionTokens?: number;
  /** Declared in the node's spec and served by the simulator; default HTTP/1.1. */
  protocol?: "h2c" | "h2";
  /**
   * An engine-shaped streaming node (`step-node.ts`) instead of the simulator: one step every
   * `stepMs` sends one token to every running stream, `tokens` tokens a stream. Set
   * `completionTokens` to the same count (the load checks it).
   */
  step?: { stepMs: number; tokens: number };
  /**
   * Behind a TD proxy (`libs/td-proxy`, its own process, simulated quoting from a test PKI)
   * that passes plain requests through and opens sealed ones, declared twice in the fleet
   * with the proxy as endpoint: `<model>-t3` at tier 3 and `<model>-t4` at tier 4.
   */
  tee?: boolean;
}

/** The TD proxy of a `tee` node, and what a client needs to trust it. */
export interface BenchTee {
  model: string;
  nodeIds: { tier3: string; tier4: string };
  proxy: ManagedProcess;
  /** The test root its quotes chain to (the attestation service's trust anchor here). */
  rootPem: string;
  /** What its quotes measure, approved for both tiers. */
  measurement: { mrtd: string; rtmr3: string };
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
  /** The `tee` node's TD proxy, when there is one. */
  tee?: BenchTee;
  /** The floor (`floor/`) in front of every HTTP/1.1 node but the `tee` one. */
  floor: BenchFloor;
  stop(): Promise<void>;
}

/** The floor's processes, and the path that reaches one model's node through it. */
export interface BenchFloor {
  url: string;
  intakePid: number | undefined;
  workerPid: number | undefined;
  /** The path of `model`'s node, or undefined when the floor does not serve it. */
  pathOf(model: string): string | undefined;
}

export interface BenchStackOptions {
  nodes: BenchNodeSpec[];
  /**
   * Services run with `--cpu-prof`, each writing its profile under `profileDir/<service>`
   * (`td-proxy` too: a `tee` node's TD proxy; `floor-intake` and `floor-worker`: the floor).
   */
  profile?: { services: string[]; dir: string };
  /**
   * Services run with `alloc-probe.ts`, each appending to `dir/<service>.jsonl` the bytes it
   * allocated between two SIGUSR2 (see `allocation.ts`).
   */
  alloc?: { services: string[]; dir: string };
  /** Extra environment for the four services (an optional feature's settings). */
  serviceEnv?: Record<string, string>;
  /**
   * Every service and the floor write a perf map (`/tmp/perf-<pid>.map`), so that `perf`
   * names their JavaScript frames (`on-cpu.ts`).
   */
  perfMaps?: boolean;
  /** The checkout whose services and nodes run; this one by default (`ab-fleet.ts`: another build). */
  root?: string;
}

const quietLog = { info() {}, warn() {}, error() {} };
// Far above any benchmark's concurrency: neither the node nor the dispatcher ever queues.
const NODE_CAPACITY = 4096;
/** The measurement the `tee` node's simulated quotes carry (and the fleet approves). */
const TEE_MEASUREMENT = { mrtd: "c1".repeat(48), rtmr3: "c3".repeat(48) };

export async function startBenchStack(options: BenchStackOptions): Promise<BenchStack> {
  const root = options.root ?? repoRoot();
  // Always a fresh server of our own, never a shared one from NATS_URL.
  const otherNats = new Set(childPidsByName("nats-server"));
  const nats: NatsServerHandle = await startNatsServer({
    env: { ...process.env, NATS_URL: undefined },
    extraIdentities: FLOOR_IDENTITIES,
  });
  // Another stack's server may run beside this one (`ab-fleet.ts`).
  const natsPid = childPidsByName("nats-server").find((pid) => !otherNats.has(pid));
  const nodes = new Map<string, BenchNode>();
  const services = new Map<string, ManagedProcess>();
  let bus: Bus | undefined;
  // h2 nodes present one certificate for 127.0.0.1, which the services are told to trust.
  const tls = options.nodes.some((n) => n.protocol === "h2") ? createTestCertificate() : undefined;
  // A `tee` node's test PKI: the TD proxy quotes with it, the attestation service trusts it.
  const teeDir = options.nodes.some((n) => n.tee)
    ? mkdtempSync(join(tmpdir(), "zml-bench-tee-"))
    : undefined;
  let tee: BenchTee | undefined;
  let floor: Floor | undefined;
  const stop = async () => {
    // SIGTERM and a long grace: profiled services write their profile on a clean exit.
    await Promise.allSettled([...services.values()].map((s) => s.stop("SIGTERM", 10_000)));
    await floor?.stop();
    await tee?.proxy.stop("SIGTERM", 3_000).catch(() => undefined);
    await Promise.allSettled([...nodes.values()].map((n) => n.process.stop("SIGTERM", 3_000)));
    await bus?.drain().catch(() => undefined);
    await nats.stop();
    tls?.dispose();
    if (teeDir !== undefined) rmSync(teeDir, { recursive: true, force: true });
  };
  try {
    const material = teeDir === undefined ? undefined : await loadTestTeeMaterial(teeDir);
    const specs: NodeSpec[][] = [];
    await Promise.all(
      options.nodes.map(async (spec, i) => {
        const node = await startSimNodeProcess(root, spec, tls);
        nodes.set(spec.model, node);
        const entry = nodeSpec(spec.model, {
          endpoint: node.url,
          models: [spec.model],
          max_concurrency: NODE_CAPACITY,
          registered_at: i,
          ...(spec.protocol === undefined ? {} : { protocol: spec.protocol }),
        });
        if (!spec.tee || teeDir === undefined || material === undefined) {
          specs[i] = [entry];
          return;
        }
        const proxy = await startTdProxyProcess(
          root,
          node.url,
          teeDir,
          probeEnv(options, "td-proxy"),
        );
        const nodeIds = { tier3: `${spec.model}-t3`, tier4: `${spec.model}-t4` };
        tee = {
          model: spec.model,
          nodeIds,
          proxy: proxy.process,
          rootPem: material.rootPem,
          measurement: TEE_MEASUREMENT,
        };
        // One TD proxy process, two fleet entries: the only difference between a plain
        // tier-3 request and a sealed tier-4 one is then the sealing.
        specs[i] = [
          { ...entry, id: nodeIds.tier3, endpoint: proxy.url, tier: 3 },
          { ...entry, id: nodeIds.tier4, endpoint: proxy.url, tier: 4 },
        ];
      }),
    );
    const fleet = parseFleetDocument(
      JSON.stringify({
        apiVersion: "zml/v1",
        nodes: specs.flat(),
        models: options.nodes.map((n) => ({ id: n.model })),
        accounts: [
          {
            id: "bench",
            api_key_sha256: [createHash("sha256").update(BENCH_API_KEY).digest("hex")],
            allowed_tiers: tee ? [1, 3, 4] : [1],
          },
        ],
      }),
    );
    bus = await connectBus({ ...nats.client(), name: "zml-bench", log: quietLog });
    await ensureBusResources(bus);
    await applyFleet(bus, fleet);
    if (tee) await approveTeeMeasurement(bus, tee);

    const env = {
      LOG_LEVEL: "warn",
      POLL_INTERVAL_MS: "2000",
      // The sims listen on 127.0.0.1: the operator's allowance for nodes on this host.
      ZML_NODE_ALLOW_LOOPBACK: "true",
      ...(tls ? { NODE_EXTRA_CA_CERTS: tls.certPath } : {}),
      ...(material ? { ATTESTATION_TRUST_ROOT_PEM_FILE: material.rootPemFile } : {}),
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
    // The floor reaches the same nodes over HTTP/1.1 as the gateway: not the HTTP/2 ones
    // (their rows compare protocols) nor the `tee` one (its rows compare sealing).
    const floorModels = options.nodes
      .filter((n) => n.protocol === undefined && !n.tee)
      .map((n) => n.model);
    floor = await startFloor(
      nats,
      floorModels.map((m) => nodes.get(m)!.url),
      compileCache,
      (identity) => probeEnv(options, identity),
    );
    try {
      // A `tee` model is routable in clear at tier 3 once the attestation service has
      // attested its TD proxy; its tier-4 entry is checked when a session is opened.
      await waitUntilRoutable(
        intakeUrl,
        [...nodes.keys()].map((model) => (model === tee?.model ? { model, tier: 3 } : { model })),
      );
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
      natsPid,
      natsDriver: nats.client(),
      ...(tls ? { caPem: tls.cert.toString("utf8") } : {}),
      ...(tee ? { tee } : {}),
      floor: {
        url: floor.url,
        intakePid: floor.intake.pid,
        workerPid: floor.worker.pid,
        pathOf: (model) => {
          const i = floorModels.indexOf(model);
          return i === -1 ? undefined : floorPath(i);
        },
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The Node options that load the CPU profiler or the allocation probe into a service. */
function probeEnv(options: BenchStackOptions, service: string): Record<string, string> {
  const nodeOptions: string[] = options.perfMaps ? ["--perf-basic-prof-only-functions"] : [];
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
  const args = spec.step
    ? [
        join(root, "test/bench/step-node.ts"),
        ...["--model", spec.model, "--step-ms", String(spec.step.stepMs)],
        ...["--tokens", String(spec.step.tokens)],
      ]
    : simArgs(root, spec, tls);
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

/** The simulator's command line for one bench node. */
function simArgs(root: string, spec: BenchNodeSpec, tls: TestCertificate | undefined): string[] {
  return [
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
}

/**
 * The TD proxy of a `tee` node, in front of its simulated node: `--tier 3` passes plain
 * requests through; sealed requests it opens at either tier (the same code a tier-4-only TD
 * proxy runs). Simulated quoting from the test PKI in `teeDir`.
 */
export async function startTdProxyProcess(
  root: string,
  backend: string,
  teeDir: string,
  env: Record<string, string>,
): Promise<{ url: string; process: ManagedProcess }> {
  const proc = await startProcess({
    name: "td-proxy",
    command: process.execPath,
    // `--profile td-proxy` profiles it as it does a service.
    env,
    args: [
      join(root, "libs/td-proxy/src/main.ts"),
      ...["--backend", backend, "--listen", "127.0.0.1:0", "--tier", "3"],
      ...["--quote-source", "simulated", "--sim-tee-dir", teeDir],
      ...["--mrtd", TEE_MEASUREMENT.mrtd, "--rtmr3", TEE_MEASUREMENT.rtmr3],
      // Info logs only at start and per session key, never per request.
      ...["--log-level", "info"],
    ],
    readyLine: /td proxy ready/,
  });
  try {
    const ready = await proc.waitForOutput(/"url":"(https:[^"]+)"/);
    return { url: ready[1]!, process: proc };
  } catch (error) {
    await proc.stop("SIGTERM", 3_000);
    throw error;
  }
}

/** The operator's approval of the `tee` node's measurement, at both tiers it is declared at. */
async function approveTeeMeasurement(bus: Bus, tee: BenchTee): Promise<void> {
  const kv = await openKv(bus, KV_BUCKETS.measurements);
  for (const tier of [3, 4]) {
    const id = `${tee.model}-t${tier}`;
    const value = { id, model: tee.model, tier, ...tee.measurement };
    await kv.put(id, encodeJson(id, ApprovedMeasurementSchema, value));
  }
}

/** One chat request that must answer 200 before a stack counts as routable. */
export interface RoutableProbe {
  model: string;
  /** The bench's key unless given. */
  apiKey?: string;
  tier?: number;
  /** More fields of the request body (e.g. `max_tokens`). */
  body?: Record<string, unknown>;
}

/** Polls each probe through the gateway until it answers 200 (its node is Active). */
export async function waitUntilRoutable(
  intakeUrl: string,
  probes: RoutableProbe[],
  { timeoutMs = 30_000, intervalMs = 200 } = {},
): Promise<void> {
  for (const { model, apiKey = BENCH_API_KEY, tier, body } of probes) {
    let last = "no answer";
    try {
      await pollUntil(
        async () => {
          const res = await request(`${intakeUrl}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
            body: JSON.stringify({
              model,
              messages: [{ role: "user", content: "ready?" }],
              ...(tier === undefined ? {} : { tier }),
              ...body,
            }),
          });
          last = `${res.statusCode} ${(await res.body.text()).slice(0, 300)}`;
          return res.statusCode === 200;
        },
        { timeoutMs, intervalMs },
      );
    } catch (error) {
      throw new Error(`the gateway did not route model ${model} in time; last answer: ${last}`, {
        cause: error,
      });
    }
  }
}
