import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openKv } from "@zml/bus";
import { KV_BUCKETS, parseRoutingHeader, ROUTING_HTTP_HEADER } from "@zml/contracts";
import { pollUntil, repoRoot } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL, authHeaders, chatBody, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { runCommand } from "../support/run-command.ts";

/**
 * Acceptance: `zml apply -f` of a changed fleet file changes routing live, and applying the
 * same file twice changes nothing. The CLI runs as the real binary against the stack's NATS.
 */

let stack: Stack;
let dir: string;

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      { nodeId: "mi300x-a", family: "MI300X" },
    ],
  });
  dir = mkdtempSync(join(tmpdir(), "zml-cli-e2e-"));
});
afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const zml = (...args: string[]) =>
  runCommand(process.execPath, [join(repoRoot(), "libs/cli/src/main.ts"), ...args], {
    // The stack's sims are on 127.0.0.1, allowed as the stack's services allow them.
    env: { ...process.env, ...stack.nats.serviceEnv("admin"), ZML_NODE_ALLOW_LOOPBACK: "true" },
  });

/**
 * The operator's fleet file, the policy in the walkthrough's YAML shape. The latency target
 * is generous: a node with no latency history is estimated at the routing core's default
 * throughput, which a 2000 ms target would pass over in favour of a node already measured.
 */
function fleetFile(first: string, second: string, name = "fleet.yaml"): string {
  const node = (id: string, family: string) => {
    const sim = stack.sims.get(id)!;
    return `  - id: ${id}
    endpoint: ${sim.url}
    framework: vllm
    accelerator_family: ${family}
    tier: 1
    models: [${MODEL}]
`;
  };
  const path = join(dir, name);
  writeFileSync(
    path,
    `apiVersion: zml/v1

nodes:
${node("h100-a", "H100")}${node("mi300x-a", "MI300X")}
models:
  - id: ${MODEL}
    default_policy: interactive

policies:
  - name: interactive
    accelerator_preference:
      - family: ${first}
        priority: 1
      - family: ${second}
        priority: 2
    latency_target_ms: 5000
    cost_priority: latency
`,
  );
  return path;
}

async function routedFamily(): Promise<string> {
  const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: chatBody(),
  });
  await res.arrayBuffer();
  expect(res.status).toBe(200);
  return parseRoutingHeader(res.headers.get(ROUTING_HTTP_HEADER)!).family;
}

async function revisions(): Promise<number[]> {
  const out: number[] = [];
  for (const bucket of [KV_BUCKETS.nodes, KV_BUCKETS.models, KV_BUCKETS.policies]) {
    out.push((await (await openKv(stack.bus, bucket)).status()).values);
  }
  return out;
}

describe("zml apply -f", () => {
  it("changes routing live when the fleet file changes, and is idempotent", async () => {
    const h100First = fleetFile("H100", "MI300X");
    const first = await zml("apply", "-f", h100First);
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    // The nodes were registered by the stack exactly as the file declares them.
    expect(first.stdout).not.toContain("nodes/");
    expect(first.stdout).toContain("+ policies/interactive created");
    expect(first.stdout).toContain("~ models/llama-3.1-8b-instruct updated (default_policy)");
    await pollUntil(async () => (await routedFamily()) === "H100", { message: "routed to H100" });

    const mi300xFirst = fleetFile("MI300X", "H100");
    const dry = await zml("apply", "-f", mi300xFirst, "--dry-run");
    expect(dry.stdout).toContain("~ policies/interactive updated (accelerator_preference)");
    expect(await routedFamily()).toBe("H100");

    const changed = await zml("apply", "-f", mi300xFirst);
    expect(changed.code).toBe(0);
    expect(changed.stdout).toContain("~ policies/interactive updated (accelerator_preference)");
    expect(changed.stdout).toContain("1 entry changed");
    await pollUntil(async () => (await routedFamily()) === "MI300X", {
      timeoutMs: 15_000,
      message: "routing follows the new preference without restarts",
    });
    for (let i = 0; i < 5; i++) expect(await routedFamily()).toBe("MI300X");

    const before = await revisions();
    const again = await zml("apply", "-f", mi300xFirst);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("no changes");
    expect(await revisions()).toEqual(before);
  });

  it("rejects an invalid file naming the field, and changes nothing", async () => {
    const path = fleetFile("MI300X", "H100", "bad.yaml");
    writeFileSync(
      path,
      readFileSync(path, "utf8").replace("cost_priority: latency", "cost_priority: fastest"),
    );
    const before = await revisions();
    const res = await zml("apply", "-f", path);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain("policies.0.cost_priority");
    expect(await revisions()).toEqual(before);
  });
});

describe("zml get", () => {
  it("shows nodes with the health aggregator's live state", async () => {
    const res = await zml("get", "nodes");
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/h100-a\s+H100\s+1\s+Active/);
    expect(res.stdout).toMatch(/mi300x-a\s+MI300X\s+1\s+Active/);
    expect((await zml("get", "policies")).stdout).toMatch(/interactive\s+MI300X 1\/1 > H100 1\/1/);
    expect((await zml("get", "models")).stdout).toMatch(
      /llama-3\.1-8b-instruct\s+interactive\s+2\/2/,
    );
  });
});
