// What the routing-quality bench runs against: simulated caching nodes (the node simulator's
// engine model, each its own process) and, for the ZML sides, its own nats-server and the four
// services as child processes, with one account per policy under test.
import { createHash } from "node:crypto";
import { join } from "node:path";
import { connectBus, ensureBusResources } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { nodeSpec } from "@zml/contracts/testing";
import type { PolicySpec } from "@zml/contracts";
import { applyFleet, parseFleetDocument } from "@zml/fleet";
import { findFreePort, repoRoot, startNatsServer, startProcess } from "@zml/harness";
import { parsePrometheusText } from "@zml/health";
import type { ManagedProcess, NatsServerHandle } from "@zml/harness";
import { request } from "undici";
import { waitUntilRoutable } from "../bench-stack.ts";

export const QUALITY_MODEL = "quality-model";

/** The simulated engine every node runs (node-sim's engine model). */
export interface QualityNodeSettings {
  count: number;
  /** max_num_seqs. */
  maxRunning: number;
  kvCacheBlocks: number;
  prefillTokensPerSecond: number;
  stepBaseMs: number;
  stepPerSequenceMs: number;
}

export const QUALITY_NODES: QualityNodeSettings = {
  count: 8,
  maxRunning: 32,
  // 32,768 tokens: 16 system prompts of 2,000 tokens, beside the blocks of running requests.
  kvCacheBlocks: 2048,
  prefillTokensPerSecond: 20_000,
  stepBaseMs: 8,
  stepPerSequenceMs: 0.25,
};

/** The API keys of the ZML sides: one account per policy. */
export const ZML_KEYS = {
  cacheAware: "quality-cache-aware-0123456789",
  loadOnly: "quality-load-only-0123456789ab",
} as const;

export interface QualityNode {
  id: string;
  url: string;
  process: ManagedProcess;
}

export interface ZmlStack {
  intakeUrl: string;
  services: Map<string, ManagedProcess>;
  /** The ops base URL (`/metrics`) of each dispatcher replica running now. */
  dispatcherOpsUrls(): string[];
  /**
   * Starts one more dispatcher replica (`dispatcher-<n>`); resolves once it is ready, with a
   * function that stops it again.
   */
  addDispatcher(): Promise<{ stop(): Promise<void> }>;
  stop(): Promise<void>;
}

const quietLog = { info() {}, warn() {}, error() {} };

/** Starts `settings.count` caching nodes, each its own process, in parallel. */
export async function startQualityNodes(settings: QualityNodeSettings): Promise<QualityNode[]> {
  const root = repoRoot();
  const started = await Promise.allSettled(
    Array.from({ length: settings.count }, async (_, i): Promise<QualityNode> => {
      const id = `cache-node-${i}`;
      const proc = await startProcess({
        name: id,
        command: process.execPath,
        args: [
          join(root, "libs/node-sim/src/cli.ts"),
          ...["--id", id, "--model", QUALITY_MODEL, "--flavour", "vllm"],
          ...["--max-concurrency", String(settings.maxRunning)],
          // Answers as long as `max_tokens` asks, up to this.
          ...["--completion-tokens", "4096"],
          ...["--kv-cache-blocks", String(settings.kvCacheBlocks)],
          ...["--prefill-tps", String(settings.prefillTokensPerSecond)],
          ...["--step-base-ms", String(settings.stepBaseMs)],
          ...["--step-per-seq-ms", String(settings.stepPerSequenceMs)],
        ],
        readyLine: /"event":"ready"/,
      });
      const ready = await proc.waitForOutput(/"url":"([^"]+)"/);
      return { id, url: ready[1]!, process: proc };
    }),
  );
  const nodes = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failure = started.find((s) => s.status === "rejected");
  if (failure !== undefined) {
    await stopNodes(nodes);
    throw failure.reason;
  }
  return nodes;
}

export async function stopNodes(nodes: QualityNode[]): Promise<void> {
  await Promise.allSettled(nodes.map((n) => n.process.stop("SIGTERM", 3_000)));
}

function policy(name: string, prefixAffinity: boolean): PolicySpec {
  return {
    name,
    accelerator_preference: [{ family: "H100", priority: 1 }],
    // Far above any TTFT here: the target never excludes a node.
    latency_target_ms: 60_000,
    cost_priority: "latency",
    // A burst over every node's slots waits at the gateway instead of failing, as it would
    // wait in the nodes' own queues on the direct sides.
    queue_on_saturation: true,
    max_queue_ms: 30_000,
    prefix_affinity: prefixAffinity,
  };
}

const sha = (key: string) => createHash("sha256").update(key).digest("hex");

/**
 * The ZML gateway over `nodes`: two accounts, `cacheAware` (policy `prefix_affinity: true`)
 * and `loadOnly` (`false`). Each node is declared as an operator would a vLLM node: its
 * `max_concurrency` is the engine's running sequences (`max_num_seqs`).
 */
export async function startZml(nodes: QualityNode[], maxRunning: number): Promise<ZmlStack> {
  const root = repoRoot();
  const nats: NatsServerHandle = await startNatsServer({
    env: { ...process.env, NATS_URL: undefined },
  });
  const services = new Map<string, ManagedProcess>();
  let bus: Bus | undefined;
  const stop = async () => {
    await Promise.allSettled([...services.values()].map((s) => s.stop("SIGTERM", 5_000)));
    await bus?.drain().catch(() => undefined);
    await nats.stop();
  };
  try {
    const fleet = parseFleetDocument(
      JSON.stringify({
        apiVersion: "zml/v1",
        nodes: nodes.map((n, i) =>
          nodeSpec(n.id, {
            endpoint: n.url,
            models: [QUALITY_MODEL],
            max_concurrency: maxRunning,
            registered_at: i,
          }),
        ),
        models: [{ id: QUALITY_MODEL }],
        policies: [policy("cache-aware", true), policy("load-only", false)],
        accounts: [
          {
            id: "cache-aware",
            api_key_sha256: [sha(ZML_KEYS.cacheAware)],
            default_policy: "cache-aware",
          },
          {
            id: "load-only",
            api_key_sha256: [sha(ZML_KEYS.loadOnly)],
            default_policy: "load-only",
          },
        ],
      }),
    );
    bus = await connectBus({ ...nats.client(), name: "zml-quality-bench", log: quietLog });
    await ensureBusResources(bus);
    await applyFleet(bus, fleet);

    const intakePort = await findFreePort();
    const env = {
      LOG_LEVEL: "warn",
      POLL_INTERVAL_MS: "500",
      // The sims listen on 127.0.0.1: the operator's allowance for nodes on this host.
      ZML_NODE_ALLOW_LOOPBACK: "true",
    };
    let dispatchers = 0;
    const dispatcherOps = new Map<string, string>();
    /** Starts a service whose `/readyz` answers on `port` (logs are at `warn`: no ready line). */
    const startService = async (name: string, port: number, extra: Record<string, string>) => {
      const service = name.replace(/-\d+$/, "");
      const proc = await startProcess({
        name,
        command: process.execPath,
        args: [join(root, `services/${service}/src/main.ts`)],
        env: { ...nats.serviceEnv(service), ...env, ...extra },
        readyUrl: `http://127.0.0.1:${port}/readyz`,
        readyTimeoutMs: 90_000,
      });
      services.set(name, proc);
      return proc;
    };
    const addDispatcher = async () => {
      dispatchers += 1;
      const name = dispatchers === 1 ? "dispatcher" : `dispatcher-${dispatchers}`;
      const port = await findFreePort();
      const proc = await startService(name, port, { DISPATCHER_OPS_PORT: String(port) });
      dispatcherOps.set(name, `http://127.0.0.1:${port}`);
      return {
        stop: async () => {
          dispatcherOps.delete(name);
          services.delete(name);
          await proc.stop("SIGTERM", 5_000);
        },
      };
    };
    const [aggregatorOps, attestationOps] = await Promise.all([findFreePort(), findFreePort()]);
    await Promise.all([
      startService("health-aggregator", aggregatorOps, {
        AGGREGATOR_OPS_PORT: String(aggregatorOps),
      }),
      startService("attestation", attestationOps, {
        ATTESTATION_OPS_PORT: String(attestationOps),
      }),
      addDispatcher(),
      startService("intake", intakePort, {
        ZML_PORT: String(intakePort),
        ZML_HOST: "127.0.0.1",
      }),
    ]);
    const intakeUrl = `http://127.0.0.1:${intakePort}`;
    await waitUntilRoutable(
      intakeUrl,
      [ZML_KEYS.cacheAware, ZML_KEYS.loadOnly].map((apiKey) => ({
        model: QUALITY_MODEL,
        apiKey,
        body: { max_tokens: 1 },
      })),
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    return {
      intakeUrl,
      services,
      dispatcherOpsUrls: () => [...dispatcherOps.values()],
      addDispatcher,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Requests each dispatcher replica routed so far (`zml_dispatcher_decisions_total{outcome="routed"}`). */
export async function routedPerReplica(opsUrls: string[]): Promise<number[]> {
  return Promise.all(
    opsUrls.map(async (url) => {
      const res = await request(`${url}/metrics`);
      const { series } = parsePrometheusText(await res.body.text());
      return (series.get("zml_dispatcher_decisions_total") ?? [])
        .filter((sample) => sample.labels["outcome"] === "routed")
        .reduce((total, sample) => total + sample.value, 0);
    }),
  );
}
