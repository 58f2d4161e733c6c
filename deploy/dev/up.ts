// `npm run up`: nats-server, a simulated fleet (tier-4 nodes behind TD proxies), the four
// services, and the fleet applied — then prints where to send requests, and the seal proxy
// command for tier 4. Ctrl-C stops everything it started. Settings:
// deploy/dev/launcher-config.ts (documented in the README).
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus, ensureBusResources } from "@zml/bus";
import { applyFleet } from "@zml/fleet";
import { NodeSpecSchema } from "@zml/contracts";
import type { FleetDocument, NodeSpec } from "@zml/contracts";
import { findLlamaServer, startLlamaServer, tinyLlamaGguf } from "@zml/llamacpp";
import {
  pollUntil,
  ProcessExitedError,
  repoRoot,
  SERVICE_NODE_FLAGS,
  serviceCompileCacheDir,
  serviceRuntimeEnv,
  warmCompileCache,
  startNatsServer,
  startProcess,
} from "@zml/harness";
import type { ManagedProcess, NatsServerHandle } from "@zml/harness";
import { ConfigError, formatConfigError, CONFIG_ERROR_EXIT_CODE } from "@zml/runtime";
import { loadLauncherFleet, splitLocalNodes, withDemoAccount } from "./launcher-fleet.ts";
import type { LocalNode } from "./launcher-fleet.ts";
import { loadLauncherConfig } from "./launcher-config.ts";
import {
  approveDemoMeasurements,
  DEMO_MRTD,
  demoMeasurements,
  tdProxyArgs,
  teeDirOf,
  TEE_TIER,
} from "./launcher-tee.ts";
import { assertPortsFree, pickFreePort } from "./ports.ts";

const root = repoRoot();
const quietLog = { info() {}, warn() {}, error() {} };

const started: ManagedProcess[] = [];
let nats: NatsServerHandle | undefined;
/** This run's own files (the simulated TEE nodes' test PKI), removed when it stops. */
let runDir: string | undefined;
let stopping = false;

/** Thrown between start-up steps once Ctrl-C was pressed, so nothing more is started. */
class Interrupted extends Error {}
function checkNotStopping(): void {
  if (stopping) throw new Interrupted("interrupted");
}

async function stopAll(): Promise<void> {
  await Promise.allSettled(started.reverse().map((p) => p.stop("SIGTERM", 5_000)));
  await nats?.stop();
  if (runDir !== undefined) await rm(runDir, { recursive: true, force: true });
}

/** 0 means "any free port": pick one now, since readiness checks need to know it. */
const pickedPorts = new Set<number>();
async function resolvePort(port: number): Promise<number> {
  return port === 0 ? pickFreePort(pickedPorts) : port;
}

/** The simulator speaking the node's framework; vLLM's wire format for the others. */
function simFlavour(node: NodeSpec): "vllm" | "tgi" | "llamacpp" {
  return node.framework === "tgi" || node.framework === "llamacpp" ? node.framework : "vllm";
}

/** The model id the real llama.cpp node answers to (`ZML_REAL_NODE=llamacpp`). */
const REAL_LLAMA_MODEL = "tiny-llama";

/**
 * Starts one real llama-server (the binary up.sh built or found, the project's tiny
 * random-weight model) on a free port; resolves with its node spec, at the demo account's
 * lowest tier so the demo key can reach it.
 */
async function startRealLlamaNode(fleet: FleetDocument, dir: string): Promise<NodeSpec> {
  const model = join(dir, "tiny-llama.gguf");
  await writeFile(model, tinyLlamaGguf());
  const port = await resolvePort(0);
  const server = await startLlamaServer({
    name: "llamacpp-a",
    binary: findLlamaServer(process.env),
    model,
    port,
    alias: REAL_LLAMA_MODEL,
    contextSize: 4096,
    slots: 2,
  });
  started.push(server);
  const tier = Math.min(...tiersOf(fleet, "demo"), 2);
  const node = NodeSpecSchema.parse({
    id: "llamacpp-a",
    endpoint: `http://127.0.0.1:${port}`,
    framework: "llamacpp",
    accelerator_family: "CPU",
    tier,
    models: [REAL_LLAMA_MODEL],
    max_concurrency: 2,
    registered_at: fleet.nodes.length,
  });
  console.log(
    `real node       ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}   (llama.cpp llama-server with a tiny random-weight model: model ${REAL_LLAMA_MODEL}, it answers nonsense)`,
  );
  return node;
}

/** Adds the real node and its model to the fleet about to be applied. */
function addRealNode(fleet: FleetDocument, node: NodeSpec): void {
  fleet.nodes.push(node);
  for (const id of node.models) {
    if (!fleet.models.some((m) => m.id === id)) fleet.models.push({ id });
  }
}

/** Starts a simulator for `node` on `port` (0: any free one); resolves with its URL. */
async function startSim(node: NodeSpec, port: number): Promise<string> {
  const args = [join(root, "libs/node-sim/src/cli.ts"), "--id", node.id, "--port", String(port)];
  args.push("--flavour", simFlavour(node), "--tps", "200");
  args.push("--max-concurrency", String(node.max_concurrency));
  for (const m of node.models) args.push("--model", m);
  const sim = await startProcess({
    name: node.id,
    command: process.execPath,
    args,
    readyLine: /"event":"ready"/,
  });
  started.push(sim);
  // The simulator prints the address it really listens on; the fleet applied says the same.
  const ready = JSON.parse((await sim.waitForOutput(/^\{"event":"ready".*\}$/))[0]) as {
    url: string;
  };
  return ready.url;
}

/**
 * Starts a TD proxy on `port` in front of `backend`, quoting through the test PKI in
 * `teeDir` (created on first use; its root is `root.pem` there); resolves with its URL.
 */
async function startTdProxy(node: NodeSpec, backend: string, port: number, teeDir: string) {
  const proxy = await startProcess({
    name: `${node.id}-td-proxy`,
    command: process.execPath,
    args: [
      join(root, "libs/td-proxy/src/main.ts"),
      ...tdProxyArgs({ backend, listenPort: port, teeDir }),
    ],
    readyLine: /"msg":"td proxy ready"/,
  });
  started.push(proxy);
  const line = (await proxy.waitForOutput(/^\{.*"msg":"td proxy ready".*\}$/))[0];
  return (JSON.parse(line) as { url: string }).url;
}

async function startSimNodes(
  local: LocalNode[],
  simPortBase: number | undefined,
  teeDir: string | undefined,
) {
  for (const [i, { node, port, tee }] of local.entries()) {
    const listen = simPortBase === undefined ? port : simPortBase === 0 ? 0 : simPortBase + i;
    let note = "";
    if (!tee) {
      node.endpoint = await startSim(node, listen);
    } else {
      // The serving framework on a free loopback port, the TD proxy where the node is reached.
      const backend = await startSim(node, 0);
      checkNotStopping();
      node.endpoint = await startTdProxy(node, backend, listen, teeDir!);
      note = `   (tier ${node.tier}: a TD proxy with simulated TDX quotes, in front of ${backend})`;
    }
    console.log(
      `simulated node  ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}${note}`,
    );
    checkNotStopping();
  }
}

function tiersOf(fleet: FleetDocument, account: string): Set<number> {
  return new Set(fleet.accounts.find((a) => a.id === account)?.allowed_tiers ?? []);
}

/** A model that a started plain simulator serves at a tier the account may use, if any. */
function probeModel(local: LocalNode[], fleet: FleetDocument, account: string): string | undefined {
  const tiers = tiersOf(fleet, account);
  return local.find(({ node, tee }) => !tee && node.tier <= 2 && tiers.has(node.tier))?.node
    .models[0];
}

/** The first simulated TEE node and its first model, if the account may use tier 4. */
function sealedTarget(
  local: LocalNode[],
  fleet: FleetDocument,
  account: string,
): { node: NodeSpec; model: string } | undefined {
  if (!tiersOf(fleet, account).has(TEE_TIER)) return undefined;
  const node = local.find(({ tee }) => tee)?.node;
  return node && { node, model: node.models[0]! };
}

/** Quoted for a POSIX shell only when it needs to be, so the printed command stays readable. */
function sh(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

async function main(): Promise<void> {
  const config = loadLauncherConfig(process.env, root);
  const { fleet: loaded, fileLabel } = loadLauncherFleet(config.fleetFile);
  const { fleet, addedAccount } = withDemoAccount(loaded, config.apiKey);
  const { local, remote } = splitLocalNodes(fleet);
  const teeNodes = local.filter((l) => l.tee);

  const intakePort = await resolvePort(config.ports.intake);
  const ops = {
    dispatcher: await resolvePort(config.ports.dispatcherOps),
    aggregator: await resolvePort(config.ports.aggregatorOps),
    attestation: await resolvePort(config.ports.attestationOps),
  };
  await assertPortsFree([
    { setting: "ZML_PORT", port: intakePort },
    { setting: "DISPATCHER_OPS_PORT", port: ops.dispatcher },
    { setting: "AGGREGATOR_OPS_PORT", port: ops.aggregator },
    { setting: "ATTESTATION_OPS_PORT", port: ops.attestation },
    ...(config.natsUrl === undefined && config.ports.nats !== 0
      ? [{ setting: "ZML_NATS_PORT", port: config.ports.nats }]
      : []),
    ...(config.simPortBase === undefined
      ? local.map(({ node, port }) => ({
          setting: "ZML_SIM_PORT_BASE",
          port,
          what: `simulated node ${node.id} (${fileLabel})`,
        }))
      : []),
  ]);

  nats = await startNatsServer(config.ports.nats === 0 ? {} : { port: config.ports.nats });
  // The user's server (NATS_URL) comes without identities: the services get NATS_INSECURE=1
  // from the harness, and the launcher's own connection below goes the same way.
  const insecure = !nats.secure;
  console.log(
    `nats-server     ${nats.url}${config.natsInsecure ? "   (NATS_URL, without identities: NATS_INSECURE)" : ""}`,
  );
  checkNotStopping();

  let tee: { dir: string; rootPemFile: string } | undefined;
  if (teeNodes.length > 0) {
    runDir = await mkdtemp(join(tmpdir(), "zml-up-"));
    tee = teeDirOf(runDir);
  }
  await startSimNodes(local, config.simPortBase, tee?.dir);
  if (config.realNode === "llamacpp") {
    runDir ??= await mkdtemp(join(tmpdir(), "zml-up-"));
    addRealNode(fleet, await startRealLlamaNode(fleet, runDir));
  }
  for (const node of remote) {
    console.log(
      `remote node     ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}   (not started by up.sh: not a local http endpoint; it must already be serving)`,
    );
  }

  // As the operator would: the admin identity creates the buckets and applies the fleet.
  const bus = await connectBus({
    ...nats.client("admin"),
    insecure,
    name: "zml-dev-apply",
    log: quietLog,
  });
  await ensureBusResources(bus);
  const changes = await applyFleet(bus, fleet, { prune: true });
  // The simulated TDs' measurement, approved before the attestation service first looks.
  const approved = demoMeasurements(teeNodes);
  await approveDemoMeasurements(bus, approved);
  await bus.drain();
  console.log(`fleet applied   ${changes.length} change(s) from ${fileLabel}`);
  if (addedAccount) {
    console.log(`                (added account "demo" for the demo API key: the fleet has none)`);
  }
  if (approved.length > 0) {
    const models = approved.map((m) => m.model).join(", ");
    console.log(
      `measurement     approved mrtd ${DEMO_MRTD.slice(0, 8)}… (the simulated TDs') for ${models} at tier ${TEE_TIER}`,
    );
  }
  checkNotStopping();

  // Simulated nodes listen on 127.0.0.1: the dev stack allows nodes on this host, which a
  // deployment refuses by default (docs/limits.md).
  const env = { LOG_LEVEL: config.logLevel, ZML_NODE_ALLOW_LOOPBACK: "true" };
  // Each service runs as its own bus identity; the admin API writes as `admin`.
  const admin = nats.serviceEnv("admin");
  const adminSeed: Record<string, string> = admin.NATS_NKEY_SEED_FILE
    ? { ZML_ADMIN_NATS_NKEY_SEED_FILE: admin.NATS_NKEY_SEED_FILE }
    : {};
  const services: Array<{ name: string; env: Record<string, string>; ready: string }> = [
    {
      name: "health-aggregator",
      env: { AGGREGATOR_OPS_PORT: String(ops.aggregator), POLL_INTERVAL_MS: "2000" },
      ready: `http://127.0.0.1:${ops.aggregator}/readyz`,
    },
    {
      name: "attestation",
      env: {
        ATTESTATION_OPS_PORT: String(ops.attestation),
        // The simulated TEE nodes' quotes chain to this run's test root, not to Intel's.
        ...(tee ? { ATTESTATION_TRUST_ROOT_PEM_FILE: tee.rootPemFile } : {}),
      },
      ready: `http://127.0.0.1:${ops.attestation}/readyz`,
    },
    {
      name: "dispatcher",
      env: { DISPATCHER_OPS_PORT: String(ops.dispatcher) },
      ready: `http://127.0.0.1:${ops.dispatcher}/readyz`,
    },
    {
      name: "intake",
      env: {
        ZML_PORT: String(intakePort),
        ZML_HOST: "127.0.0.1",
        ZML_ADMIN_TOKEN: config.adminToken,
        ZML_ENV: "dev",
        ...adminSeed,
      },
      ready: `http://127.0.0.1:${intakePort}/readyz`,
    },
  ];
  // Started as deployed (libs/harness "service-flags"): the warm compile cache keeps Node's
  // TypeScript stripper out of each service (~40 MiB each).
  const compileCache = serviceCompileCacheDir(root);
  await warmCompileCache(
    root,
    services.map((s) => s.name),
    compileCache,
  );
  for (const s of services) {
    try {
      started.push(
        await startProcess({
          name: s.name,
          command: process.execPath,
          args: [...SERVICE_NODE_FLAGS, join(root, `services/${s.name}/src/main.ts`)],
          env: {
            ...serviceRuntimeEnv(compileCache),
            ...nats.serviceEnv(s.name),
            ...env,
            ...s.env,
          },
          readyUrl: s.ready,
          readyTimeoutMs: 30_000,
          echo: true,
        }),
      );
    } catch (error) {
      // Its output is already on the terminal (echo): say what happened, not all of it again.
      if (error instanceof ProcessExitedError) {
        throw new Error(`${s.name} exited (code ${String(error.exitCode)}) during start-up`, {
          cause: error,
        });
      }
      throw error;
    }
    checkNotStopping();
  }

  const intake = `http://127.0.0.1:${intakePort}`;
  const model = probeModel(local, fleet, "demo");
  if (model === undefined) {
    console.log(
      "no simulated node serves the demo account's tiers: skipping the end-to-end check (requests route once your nodes are Active)",
    );
  } else {
    // Up means a real request routes end to end (nodes turn Active after the first poll).
    await pollUntil(
      async () => {
        const res = await fetch(`${intake}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${config.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "ping" }] }),
        });
        await res.arrayBuffer();
        return res.status === 200;
      },
      {
        timeoutMs: 30_000,
        intervalMs: 250,
        message: `a first request for ${model} through the gateway`,
      },
    );
  }
  const example = model ?? fleet.models[0]?.id ?? "<model>";

  // Tier 4 is up once a session opens: the node is Active and attested with a fresh quote.
  const sealed = sealedTarget(local, fleet, "demo");
  if (sealed !== undefined) {
    await pollUntil(() => openAndEndSession(intake, config.apiKey, sealed.model), {
      timeoutMs: 60_000,
      intervalMs: 250,
      message: `a tier-4 session for ${sealed.model} (${sealed.node.id} attested)`,
    });
  }

  console.log(`
ZML is serving.
  intake URL   ${intake}
  API key      ${config.apiKey}
  admin token  ${config.adminToken}${config.adminTokenGenerated ? "   (generated for this run; set ZML_ADMIN_TOKEN to fix it)" : ""}
               admin API under ${intake}/admin/v1/; OpenAPI at ${intake}/openapi.json
  fleet CLI    ${cliEnv(admin)}npm run zml -- get nodes --nats ${nats.url}
  metrics      ${intake}/metrics, http://127.0.0.1:${ops.dispatcher}/metrics (dispatcher), :${ops.aggregator} (aggregator), :${ops.attestation} (attestation)

Try:
  curl -s ${intake}/v1/chat/completions \\
    -H "authorization: Bearer ${config.apiKey}" -H "content-type: application/json" \\
    -d '{"model":"${example}","messages":[{"role":"user","content":"Hello"}]}' -i
${sealed && tee ? sealProxyBanner(intake, config.apiKey, sealed, teeNodes, tee.rootPemFile) : ""}${
    sealed === undefined && teeNodes.length > 0
      ? "\n(account demo may not use tier 4: add 4 to its allowed_tiers for the seal proxy)\n"
      : ""
  }
Ctrl-C stops everything.`);
}

/** The port the printed `zml seal-proxy` command listens on (the seal proxy's default). */
const SEAL_PROXY_LISTEN = "127.0.0.1:8787";

function sealProxyBanner(
  intake: string,
  apiKey: string,
  sealed: { node: NodeSpec; model: string },
  teeNodes: LocalNode[],
  rootPemFile: string,
): string {
  const ids = teeNodes.map(({ node }) => node.id).join(", ");
  return `
Tier 4, sealed end to end: run this, then point curl or any OpenAI client at http://${SEAL_PROXY_LISTEN}/v1
  npm run zml -- seal-proxy --gateway ${sh(intake)} --api-key ${sh(apiKey)} \\
    --model ${sh(sealed.model)} --listen ${SEAL_PROXY_LISTEN} \\
    --trust-test-root ${sh(rootPemFile)}
  (--trust-test-root: this run's TEST root, which only its simulated TEE nodes (${ids})
  chain to; never trust it for a real node)
`;
}

/** Opens a tier-4 session and ends it again: true once that works. */
async function openAndEndSession(intake: string, apiKey: string, model: string): Promise<boolean> {
  const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
  const res = await fetch(`${intake}/v1/sessions`, {
    method: "POST",
    headers,
    body: JSON.stringify({ model, ttl_s: 60 }),
  });
  const body = (await res.json().catch(() => ({}))) as { session_id?: string };
  if (res.status !== 201 || body.session_id === undefined) return false;
  const end = await fetch(`${intake}/v1/sessions/${body.session_id}`, {
    method: "DELETE",
    headers: { authorization: headers.authorization },
  });
  await end.arrayBuffer();
  return true;
}

/** The admin identity's settings as a shell prefix, so the printed CLI command just works. */
function cliEnv(admin: Record<string, string>): string {
  return Object.entries(admin)
    .filter(([k]) => k !== "NATS_URL")
    .map(([k, v]) => `${k}=${v} `)
    .join("");
}

const shutdown = () => {
  if (stopping) process.exit(1);
  stopping = true;
  console.log("\nstopping…");
  void stopAll().finally(() => process.exit(0));
};
process.on("SIGINT", shutdown);
process.on("SIGTERM", shutdown);

main().catch(async (err: unknown) => {
  if (err instanceof Interrupted) return; // shutdown() is already stopping everything
  if (err instanceof ConfigError) {
    process.stderr.write(formatConfigError("up", err));
  } else {
    console.error(`up failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  await stopAll();
  process.exit(err instanceof ConfigError ? CONFIG_ERROR_EXIT_CODE : 1);
});
