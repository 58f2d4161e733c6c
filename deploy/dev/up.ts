// `npm run up`: nats-server, a simulated fleet, the four services, and the demo fleet
// applied — then prints where to send requests. Ctrl-C stops everything it started.
import { createHash } from "node:crypto";
import { join } from "node:path";
import { connectBus } from "@zml/bus";
import { applyFleet, loadFleetFile } from "@zml/fleet";
import { pollUntil, repoRoot, startNatsServer, startProcess } from "@zml/harness";
import type { ManagedProcess, NatsServerHandle } from "@zml/harness";

const root = repoRoot();
const apiKey = process.env.ZML_DEMO_API_KEY || "zml-demo-key";
const adminToken = process.env.ZML_ADMIN_TOKEN || "zml-demo-admin";
const intakePort = Number(process.env.ZML_PORT || 8080);
const fleetFile = process.env.ZML_FLEET_FILE || join(root, "deploy/config/dev-fleet.yaml");
const quietLog = { info() {}, warn() {}, error() {} };

const started: ManagedProcess[] = [];
let nats: NatsServerHandle | undefined;

async function stopAll(): Promise<void> {
  await Promise.allSettled(started.reverse().map((p) => p.stop("SIGTERM", 5_000)));
  await nats?.stop();
}

async function main(): Promise<void> {
  const fleet = await loadFleetFile(fleetFile);
  const account = fleet.accounts.find((a) => a.id === "demo");
  if (account) {
    account.api_key_sha256 = [createHash("sha256").update(apiKey).digest("hex")];
  }

  nats = await startNatsServer({ port: Number(process.env.ZML_NATS_PORT || 4222) });
  console.log(`nats-server     ${nats.url}`);

  for (const node of fleet.nodes) {
    const url = new URL(node.endpoint);
    if (url.hostname !== "127.0.0.1" && url.hostname !== "localhost") continue;
    const args = [join(root, "libs/node-sim/src/cli.ts"), "--id", node.id, "--port", url.port];
    args.push("--flavour", node.framework === "tgi" ? "tgi" : "vllm", "--tps", "200");
    for (const m of node.models) args.push("--model", m);
    started.push(
      await startProcess({
        name: node.id,
        command: process.execPath,
        args,
        readyLine: /"event":"ready"/,
      }),
    );
    console.log(
      `simulated node  ${node.id.padEnd(10)} ${node.accelerator_family.padEnd(7)} ${node.endpoint}`,
    );
  }

  const bus = await connectBus({ servers: nats.url, name: "zml-dev-apply", log: quietLog });
  const changes = await applyFleet(bus, fleet, { prune: true });
  await bus.drain();
  console.log(`fleet applied   ${changes.length} change(s) from ${fleetFile}`);

  const env = { NATS_URL: nats.url, LOG_LEVEL: process.env.LOG_LEVEL || "warn" };
  const services: Array<{ name: string; env: Record<string, string>; ready: string }> = [
    {
      name: "health-aggregator",
      env: { AGGREGATOR_OPS_PORT: "9102", POLL_INTERVAL_MS: "2000" },
      ready: "http://127.0.0.1:9102/readyz",
    },
    {
      name: "attestation",
      env: { ATTESTATION_OPS_PORT: "9103" },
      ready: "http://127.0.0.1:9103/readyz",
    },
    {
      name: "dispatcher",
      env: { DISPATCHER_OPS_PORT: "9101" },
      ready: "http://127.0.0.1:9101/readyz",
    },
    {
      name: "intake",
      env: { ZML_PORT: String(intakePort), ZML_HOST: "127.0.0.1", ZML_ADMIN_TOKEN: adminToken },
      ready: `http://127.0.0.1:${intakePort}/readyz`,
    },
  ];
  for (const s of services) {
    started.push(
      await startProcess({
        name: s.name,
        command: process.execPath,
        args: [join(root, `services/${s.name}/src/main.ts`)],
        env: { ...env, ...s.env },
        readyUrl: s.ready,
        readyTimeoutMs: 30_000,
        echo: true,
      }),
    );
  }

  const intake = `http://127.0.0.1:${intakePort}`;
  // The system is up once a real request routes end to end (nodes become Active after the
  // aggregator's first poll).
  await pollUntil(
    async () => {
      const res = await fetch(`${intake}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "llama-3.1-8b-instruct",
          messages: [{ role: "user", content: "ping" }],
        }),
      });
      await res.arrayBuffer();
      return res.status === 200;
    },
    { timeoutMs: 30_000, intervalMs: 250, message: "first request through the gateway" },
  );

  console.log(`
ZML is serving.
  intake URL   ${intake}
  API key      ${apiKey}
  admin token  ${adminToken}   (admin API under ${intake}/admin/v1/; OpenAPI at ${intake}/openapi.json)
  fleet CLI    npm run zml -- get nodes --nats ${nats.url}
  metrics      ${intake}/metrics, http://127.0.0.1:9101/metrics (dispatcher), :9102 (aggregator), :9103 (attestation)

Try:
  curl -s ${intake}/v1/chat/completions \\
    -H "authorization: Bearer ${apiKey}" -H "content-type: application/json" \\
    -d '{"model":"llama-3.1-8b-instruct","messages":[{"role":"user","content":"Hello"}]}' -i

Ctrl-C stops everything.`);
}

let stopping = false;
const shutdown = () => {
  if (stopping) process.exit(1);
  stopping = true;
  console.log("\nstopping…");
  void stopAll().finally(() => process.exit(0));
};
process.on("SIGINT", shutdown);
process.on("SIGTERM", shutdown);

main().catch(async (err: unknown) => {
  console.error(`up failed: ${err instanceof Error ? err.message : String(err)}`);
  await stopAll();
  process.exit(1);
});
