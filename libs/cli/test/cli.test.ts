import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus, openKv } from "@zml/bus";
import { startBusRig } from "@zml/bus/testing";
import type { BusRig } from "@zml/bus/testing";
import { KV_BUCKETS } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { activeNodeState } from "@zml/contracts/testing";
import { findNatsServerBinary, repoRoot, startProcess } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../src/index.ts";

const quiet = { info() {}, warn() {}, error() {} };
let rig: BusRig;

beforeAll(async () => {
  rig = await startBusRig({ name: "cli-test" });
});
afterAll(() => rig?.stop());

/**
 * Runs the CLI in-process against the test's NATS, with files from `files`. The fleet's nodes
 * are on 127.0.0.1, so loopback is allowed unless `env` says otherwise.
 */
async function zml(
  argv: string[],
  files: Record<string, string> = {},
  env: Record<string, string> = { ZML_NODE_ALLOW_LOOPBACK: "true" },
) {
  let stdout = "";
  let stderr = "";
  const code = await runCli(argv, {
    stdout: (s) => (stdout += s),
    stderr: (s) => (stderr += s),
    readFile: (path) => {
      const text = files[path];
      if (text === undefined) throw new Error(`ENOENT: no such file ${path}`);
      return new TextEncoder().encode(text);
    },
    env: { ...rig.nats.serviceEnv("admin"), ...env },
    now: () => new Date("2026-01-01T00:00:00Z"),
  });
  return { code, stdout, stderr };
}

// The walkthrough's policy shape, verbatim.
const fleet = (latency = 2000, extraPolicy = "") => `apiVersion: zml/v1
nodes:
  - id: h100-a
    endpoint: http://127.0.0.1:18101
    framework: vllm
    accelerator_family: H100
    tier: 1
    models: [llama-3.1-8b-instruct]
  - id: mi300x-a
    endpoint: http://127.0.0.1:18103
    framework: vllm
    accelerator_family: MI300X
    tier: 1
    models: [llama-3.1-8b-instruct]
models:
  - id: llama-3.1-8b-instruct
    default_policy: interactive
policies:
  - name: interactive
    accelerator_preference:
      - family: H100
        priority: 1
      - family: MI300X
        priority: 2
    latency_target_ms: ${latency}
    cost_priority: latency
${extraPolicy}accounts:
  - id: demo
    allowed_tiers: [1, 2]
    rate_limit:
      requests_per_minute: 600
`;
const batchPolicy = `  - name: batch-cheap
    accelerator_preference:
      - family: MI300X
        priority: 1
    latency_target_ms: 30000
    cost_priority: cost
    queue_on_saturation: true
    max_queue_ms: 60000
`;

describe("zml apply", () => {
  it("refuses a node at a cloud metadata address or with credentials in its URL", async () => {
    const apply = (text: string) => zml(["apply", "-f", "fleet.yaml"], { "fleet.yaml": text });
    const metadata = await apply(
      fleet().replace("http://127.0.0.1:18103", "http://169.254.169.254"),
    );
    expect(metadata.code).not.toBe(0);
    expect(metadata.stderr).toMatch(/nodes\.1\.endpoint: .*metadata/);
    const credentials = await apply(
      fleet().replace("http://127.0.0.1:18101", "http://user:pw@10.0.0.9:8000"),
    );
    expect(credentials.code).not.toBe(0);
    expect(credentials.stderr).toMatch(/nodes\.0\.endpoint: .*credentials/);
  });

  it("refuses nodes on the gateway's own host unless loopback is allowed, naming each rule", async () => {
    const text = fleet()
      .replace("http://127.0.0.1:18101", "http://2130706433:18101")
      .replace("http://127.0.0.1:18103", "http://0.0.0.0:18103");
    const files = { "fleet.yaml": text };
    const refused = await zml(["apply", "-f", "fleet.yaml", "--dry-run"], files, {});
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(
      /nodes\.0\.endpoint: 127\.0\.0\.1 is a loopback address.*\(node_address_loopback\)/,
    );
    expect(refused.stderr).toMatch(
      /nodes\.1\.endpoint: 0\.0\.0\.0 is an unspecified address.*\(node_address_unspecified\)/,
    );
    const localhost = await zml(
      ["apply", "-f", "fleet.yaml", "--dry-run"],
      { "fleet.yaml": fleet().replace("127.0.0.1:18101", "localhost:18101") },
      { ZML_NODE_ALLOW_LOOPBACK: "false" },
    );
    expect(localhost.stderr).toMatch(/nodes\.0\.endpoint: localhost .*\(node_address_loopback\)/);
    expect(localhost.stderr).toMatch(
      /nodes\.1\.endpoint: 127\.0\.0\.1 .*\(node_address_loopback\)/,
    );
    // Allowed, loopback passes and the unspecified address is still refused.
    const allowed = await zml(["apply", "-f", "fleet.yaml", "--dry-run"], files);
    expect(allowed.stderr).not.toMatch(/nodes\.0\.endpoint/);
    expect(allowed.stderr).toMatch(/nodes\.1\.endpoint: .*\(node_address_unspecified\)/);
    const wrong = await zml(["apply", "-f", "fleet.yaml"], files, {
      ZML_NODE_ALLOW_LOOPBACK: "sure",
    });
    expect(wrong.stderr).toMatch(/ZML_NODE_ALLOW_LOOPBACK: /);
  });

  it("shows and applies the changes, and changes nothing the second time", async () => {
    const first = await zml(["apply", "-f", "fleet.yaml"], { "fleet.yaml": fleet() });
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    expect(first.stdout).toContain("+ nodes/h100-a created");
    expect(first.stdout).toContain("+ policies/interactive created");
    expect(first.stdout).toContain("+ accounts/demo created");
    expect(first.stdout).toContain("5 entries changed");
    const again = await zml(["apply", "-f", "fleet.yaml"], { "fleet.yaml": fleet() });
    expect(again.code).toBe(0);
    expect(again.stdout).toBe("no changes (fleet.yaml is already applied)\n");
  });

  it("names the fields an update changes, and --dry-run changes nothing", async () => {
    const files = { "fleet.yaml": fleet(1500, batchPolicy) };
    const dry = await zml(["apply", "-f", "fleet.yaml", "--dry-run"], files);
    expect(dry.stdout).toContain("~ policies/interactive updated (latency_target_ms)");
    expect(dry.stdout).toContain("+ policies/batch-cheap created");
    expect(dry.stdout).toContain("2 entries would change");
    const kv = await openKv(rig.bus, KV_BUCKETS.policies);
    expect((await kv.get("interactive"))!.json()).toMatchObject({ latency_target_ms: 2000 });
    const real = await zml(["apply", "-f", "fleet.yaml"], files);
    expect(real.stdout).toContain("2 entries changed");
    expect((await kv.get("interactive"))!.json()).toMatchObject({ latency_target_ms: 1500 });
  });

  it("deletes what the file no longer lists only with --prune", async () => {
    const files = { "fleet.yaml": fleet(1500) };
    expect((await zml(["apply", "-f", "fleet.yaml"], files)).stdout).toContain("no changes");
    const pruned = await zml(["apply", "-f", "fleet.yaml", "--prune"], files);
    expect(pruned.stdout).toContain("- policies/batch-cheap deleted");
  });

  it("reports every problem of an invalid file with its path, and changes nothing", async () => {
    const bad = fleet()
      .replace("cost_priority: latency", "cost_priority: cheapest")
      .replace("tier: 1", "tier: 9");
    const res = await zml(["apply", "-f", "fleet.yaml"], { "fleet.yaml": bad });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain("policies.0.cost_priority");
    expect(res.stderr).toContain("nodes.0.tier");
    // file:line:column, as compilers print it.
    const tierLine = bad.split("\n").findIndex((l) => l.includes("tier: 9")) + 1;
    expect(res.stderr).toMatch(new RegExp(`fleet\\.yaml:${tierLine}:\\d+: nodes\\.0\\.tier: `));
    expect((await zml(["apply", "-f", "missing.yaml"])).stderr).toContain(
      "cannot read missing.yaml",
    );
    expect((await zml(["apply"])).code).toBe(2);
    expect((await zml(["apply", "-f", "x", "--force"])).code).toBe(2);
  });
});

describe("zml get", () => {
  it("joins nodes with their live state", async () => {
    const state = activeNodeState("h100-a", 1, {
      queue_depth: 3,
      running: 2,
      waiting: 1,
      health_score: 97,
    });
    await (await openKv(rig.bus, KV_BUCKETS.nodeState)).put("h100-a", JSON.stringify(state));
    const res = await zml(["get", "nodes"]);
    expect(res.code).toBe(0);
    const lines = res.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^NODE\s+FAMILY\s+TIER\s+STATUS\s+QUEUE\s+HEALTH/);
    expect(lines.find((l) => l.startsWith("h100-a"))).toMatch(/H100\s+1\s+Active\s+3\/16\s+97/);
    expect(lines.find((l) => l.startsWith("mi300x-a"))).toMatch(/Unknown/);
    const json = JSON.parse((await zml(["get", "nodes", "-o", "json"])).stdout) as Array<{
      spec: { id: string };
      state?: NodeState;
    }>;
    expect(json.find((n) => n.spec.id === "h100-a")!.state!.queue_depth).toBe(3);
  });

  it("shows why a node's probes fail in the table", async () => {
    const reason =
      "unreadable vllm metrics: missing series vllm:num_requests_running; these are llama.cpp metrics: register the node with framework: llamacpp";
    const state = {
      ...activeNodeState("mi300x-a", 1),
      status: "Isolated" as const,
      health_score: 0,
      consecutive_failures: 3,
      last_error: reason,
    };
    await (await openKv(rig.bus, KV_BUCKETS.nodeState)).put("mi300x-a", JSON.stringify(state));
    const res = await zml(["get", "nodes"]);
    const lines = res.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/\sPROBLEMS$/);
    const row = lines.find((l) => l.startsWith("mi300x-a"))!;
    expect(row).toMatch(/Isolated\s+0\/\d+\s+0\s/);
    expect(row.endsWith(reason)).toBe(true);
    expect(lines.find((l) => l.startsWith("h100-a"))).toMatch(/\s-$/);
  });

  it("shows a registered model its engine refuses, and apply --dry-run warns of it", async () => {
    const kv = await openKv(rig.bus, KV_BUCKETS.nodeState);
    const before = await kv.get("h100-a");
    const state = activeNodeState("h100-a", 2, {
      served_models: ["meta-llama/Llama-3.1-8B-Instruct"],
      unserved_models: ["llama-3.1-8b-instruct"],
    });
    await kv.put("h100-a", JSON.stringify(state));
    const row = (await zml(["get", "nodes"])).stdout
      .split("\n")
      .find((l) => l.startsWith("h100-a"))!;
    expect(row).toMatch(/Active\s/);
    expect(row.endsWith("not served by its engine, not routed: llama-3.1-8b-instruct")).toBe(true);

    const dry = await zml(["apply", "-f", "fleet.yaml", "--dry-run"], {
      "fleet.yaml": fleet(1500),
    });
    expect(dry.code).toBe(0);
    expect(dry.stderr).toBe(
      "warning: node h100-a is registered for llama-3.1-8b-instruct, which its engine does not serve " +
        "(it serves meta-llama/Llama-3.1-8B-Instruct): vLLM refuses a model it does not serve: " +
        "these will not be routed to it\n",
    );
    await kv.put("h100-a", before!.string());
  });

  it("shows each policy's chain with active nodes per family, models and accounts", async () => {
    expect((await zml(["get", "policies"])).stdout).toMatch(
      /interactive\s+H100 1\/1 > MI300X 0\/1\s+latency\s+1500ms\s+fail fast/,
    );
    expect((await zml(["get", "models"])).stdout).toMatch(
      /llama-3\.1-8b-instruct\s+interactive\s+1\/2\s+1\s+H100,MI300X/,
    );
    const accounts = await zml(["get", "accounts"]);
    expect(accounts.stdout).toMatch(/demo\s+1,2\s+-\s+600\/min\s+0/);
  });

  it("rejects an unknown kind or format", async () => {
    expect((await zml(["get", "widgets"])).code).toBe(2);
    expect((await zml(["get", "nodes", "-o", "yaml"])).code).toBe(2);
  });
});

describe("zml revoke", () => {
  const MRTD = "AB".repeat(48);
  it("adds a validated entry, refuses a duplicate, lists and withdraws it", async () => {
    const res = await zml([
      "revoke",
      "sa-00837",
      "--reason",
      "TDX module advisory",
      "--advisory",
      "INTEL-SA-00837",
      "--mrtd",
      MRTD,
    ]);
    expect(res.stderr).toBe("");
    expect(res.stdout).toBe("revoked sa-00837\n");
    const stored = (await (await openKv(rig.bus, KV_BUCKETS.revocations)).get("sa-00837"))!.json();
    expect(stored).toEqual({
      id: "sa-00837",
      reason: "TDX module advisory",
      advisory_id: "INTEL-SA-00837",
      mrtd: MRTD.toLowerCase(),
      revoked_at: Date.parse("2026-01-01T00:00:00Z"),
    });
    expect((await zml(["revoke", "sa-00837", "--reason", "x", "--node", "h100-a"])).code).toBe(1);
    expect((await zml(["get", "revocations"])).stdout).toMatch(
      /sa-00837\s+mrtd=ab.*advisory_id=INTEL-SA-00837/,
    );
    expect((await zml(["revoke", "--withdraw", "sa-00837"])).stdout).toBe("withdrew sa-00837\n");
    expect((await zml(["revoke", "--withdraw", "sa-00837"])).code).toBe(1);
  });

  it("names the flag that is wrong", async () => {
    const noMatch = await zml(["revoke", "r1", "--reason", "x"]);
    expect(noMatch.code).toBe(2);
    expect(noMatch.stderr).toContain("give at least one of --node");
    expect((await zml(["revoke", "r1", "--reason", "x", "--mrtd", "12"])).stderr).toContain(
      "--mrtd:",
    );
    expect((await zml(["revoke", "r1", "--node", "h100-a"])).stderr).toContain("--reason:");
    expect((await zml(["revoke", "bad id", "--reason", "x", "--node", "n"])).stderr).toContain(
      "<id>:",
    );
  });
});

describe("zml bus-credentials", { timeout: 30_000 }, () => {
  it("makes identities, an authorization config and a CA that a real nats-server runs with", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-cli-creds-"));
    try {
      const out = join(dir, "creds");
      const args = ["bus-credentials", "--out", out, "--batch-account", "acme"];
      // nats.js checks a loopback server's certificate against `localhost`.
      const first = await zml([...args, "--tls", "--host", "127.0.0.1", "--host", "localhost"]);
      expect(first.code).toBe(0);
      expect(first.stdout).toMatch(/^generated intake +U[A-Z2-7]{55}$/m);
      expect(first.stdout).toMatch(/^generated batch-acme /m);
      const again = await zml(args);
      expect(again.stdout).toMatch(/^kept +intake /m);
      const rotated = await zml([...args, "--rotate", "intake"]);
      expect(rotated.stdout).toMatch(/^generated intake /m);
      expect(rotated.stdout).toMatch(/^kept +dispatcher /m);

      const conf = join(dir, "nats.conf");
      await writeFile(
        conf,
        [
          'host: "127.0.0.1"',
          "port: -1",
          'include "creds/auth.conf"',
          `tls { cert_file: "${out}/tls/server.pem", key_file: "${out}/tls/server-key.pem", timeout: 5 }`,
        ].join("\n"),
      );
      await using server = await startProcess({
        name: "nats-server",
        command: findNatsServerBinary()!,
        args: ["-c", conf],
        readyLine: /Server is ready/,
      });
      const port = (await server.waitForOutput(/client connections on \S+:(\d+)/))[1];
      const intake = await connectBus({
        servers: `nats://127.0.0.1:${port}`,
        nkeySeedFile: join(out, "intake.nk"),
        caFile: join(out, "tls/ca.pem"),
        name: "cli-creds-test",
        log: quiet,
      });
      await intake.drain();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses an unknown identity to rotate or a bad account, as usage errors", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-cli-creds-"));
    try {
      const rotate = await zml(["bus-credentials", "--out", dir, "--rotate", "root"]);
      expect(rotate.code).toBe(2);
      expect(rotate.stderr).toContain("unknown bus identity 'root'");
      const account = await zml(["bus-credentials", "--out", dir, "--batch-account", "a.b"]);
      expect(account.code).toBe(2);
      expect(account.stderr).toContain("--batch-account");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the zml binary", { timeout: 30_000 }, () => {
  it("runs verify-quote from the TDX library", () => {
    const root = repoRoot();
    const out = spawnSync(
      process.execPath,
      [
        join(root, "libs/cli/src/main.ts"),
        "verify-quote",
        join(root, "libs/tdx/test/fixtures/v4-dcap-qvl-phala.bin"),
        "--at",
        "2025-07-01T00:00:00Z",
      ],
      { encoding: "utf8" },
    );
    expect(out.status).toBe(0);
    expect(out.stdout).toContain("Verdict: VERIFIED");
  });

  it("suggests the command meant when one is misspelt", async () => {
    const res = await zml(["aply", "-f", "fleet.yaml"]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("zml: unknown command 'aply'; did you mean 'apply'?");
    expect((await zml(["revokee"])).stderr).toContain("did you mean 'revoke'?");
    expect((await zml(["verify-qoute"])).stderr).toContain("did you mean 'verify-quote'?");
    // Nothing close: no guess.
    const far = await zml(["deploy"]);
    expect(far.stderr).toContain("zml: unknown command 'deploy'\n");
    expect(far.stderr).not.toContain("did you mean");
  });

  it("fails fast with a clear message when NATS is unreachable", () => {
    const out = spawnSync(
      process.execPath,
      [join(repoRoot(), "libs/cli/src/main.ts"), "get", "nodes", "--nats", "nats://127.0.0.1:1"],
      {
        encoding: "utf8",
        timeout: 30_000,
      },
    );
    expect(out.status).toBe(1);
    expect(out.stderr).toContain("cannot reach NATS at nats://127.0.0.1:1");
  });
});
