// `npm run up`: nats-server, a simulated fleet, the four services, and the fleet applied —
// then prints where to send requests. Ctrl-C stops everything it started. Settings:
// deploy/dev/launcher-config.ts (documented in the README).
import { join } from "node:path";
import { connectBus, ensureBusResources } from "@zml/bus";
import { applyFleet } from "@zml/fleet";
import type { FleetDocument } from "@zml/contracts";
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
import { assertPortsFree, pickFreePort } from "./ports.ts";

const root = repoRoot();
const quietLog = { info() {}, warn() {}, error() {} };

const started: ManagedProcess[] = [];
let nats: NatsServerHandle | undefined;
let stopping = false;

/** Thrown between start-up steps once Ctrl-C was pressed, so nothing more is started. */
class Interrupted extends Error {}
function checkNotStopping(): void {
  if (stopping) throw new Interrupted("interrupted");
}

async function stopAll(): Promise<void> {
  await Promise.allSettled(started.reverse().map((p) => p.stop("SIGTERM", 5_000)));
  await nats?.stop();
}

/** 0 means "any free port": pick one now, since readiness checks need to know it. */
const pickedPorts = new Set<number>();
async function resolvePort(port: number): Promise<number> {
  return port === 0 ? pickFreePort(pickedPorts) : port;
}

async function startSimNodes(local: LocalNode[], simPortBase: number | undefined) {
  for (const [i, { node, port }] of local.entries()) {
    const listen = simPortBase === undefined ? port : simPortBase === 0 ? 0 : simPortBase + i;
    const args = [
      join(root, "libs/node-sim/src/cli.ts"),
      "--id",
      node.id,
      "--port",
      String(listen),
    ];
    args.push("--flavour", node.framework === "tgi" ? "tgi" : "vllm", "--tps", "200");
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
    node.endpoint = ready.url;
    console.log(
      `simulated node  ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}`,
    );
    checkNotStopping();
  }
}

/** A model that a started simulator serves at a tier the demo account may use, if any. */
function probeModel(local: LocalNode[], fleet: FleetDocument, account: string): string | undefined {
  const tiers = new Set(fleet.accounts.find((a) => a.id === account)?.allowed_tiers ?? []);
  return local.find(({ node }) => tiers.has(node.tier))?.node.models[0];
}

async function main(): Promise<void> {
  const config = loadLauncherConfig(process.env, root);
  const { fleet: loaded, fileLabel } = loadLauncherFleet(config.fleetFile);
  const { fleet, addedAccount } = withDemoAccount(loaded, config.apiKey);
  const { local, remote } = splitLocalNodes(fleet);

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
  console.log(`nats-server     ${nats.url}`);
  checkNotStopping();

  await startSimNodes(local, config.simPortBase);
  for (const node of remote) {
    console.log(
      `remote node     ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}   (not started by up.sh: not a local http endpoint; it must already be serving)`,
    );
  }

  // As the operator would: the admin identity creates the buckets and applies the fleet.
  const bus = await connectBus({ ...nats.client("admin"), name: "zml-dev-apply", log: quietLog });
  await ensureBusResources(bus);
  const changes = await applyFleet(bus, fleet, { prune: true });
  await bus.drain();
  console.log(`fleet applied   ${changes.length} change(s) from ${fileLabel}`);
  if (addedAccount) {
    console.log(`                (added account "demo" for the demo API key: the fleet has none)`);
  }
  checkNotStopping();

  const env = { LOG_LEVEL: config.logLevel };
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
      env: { ATTESTATION_OPS_PORT: String(ops.attestation) },
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

Ctrl-C stops everything.`);
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
