import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, chainPolicy, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { approveMeasurements, MRTD, teeNode, waitForResult, pki } from "./attestation-fixtures.ts";

/**
 * Acceptance: the TypeScript SDK and the CLI work as a user gets them. Each package is
 * packed (`npm pack`, which builds it), installed offline into an empty project outside the
 * repository, and its README example runs there against a real gateway: the SDK's example
 * is type-checked against the installed declarations, then run with Node.
 */

const run = promisify(execFile);
const root = repoRoot();
/** The user's npm, from PATH. */
const npm = ["npm"];

let stack: Stack;
let project: string;

/** The first fenced block of `lang` after `heading` in a README, exactly as written. */
function readmeBlock(readme: string, heading: string, lang: string): string {
  const text = readFileSync(join(root, readme), "utf8");
  const section = text.slice(text.indexOf(`\n## ${heading}\n`));
  const m = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section);
  if (!m?.[1]) throw new Error(`${readme}: no ${lang} block under '## ${heading}'`);
  return m[1];
}

async function sh(command: string[], cwd: string, env: Record<string, string> = {}) {
  const [file, ...args] = command;
  return run(file!, args, {
    cwd,
    env: { ...process.env, ...env },
    maxBuffer: 16 * 1024 * 1024,
  });
}

const payloads = () =>
  Object.fromEntries([...stack.sims].map(([id, sim]) => [id, sim.stats().payloads_received]));

beforeAll(async () => {
  stack = await startStack({
    nodes: [
      { nodeId: "h100-a", family: "H100" },
      { nodeId: "mi300x-a", family: "MI300X" },
      { ...teeNode("t4-a", {}, 4), family: "B200" },
    ],
    fleet: { policies: [chainPolicy("interactive", ["H100", "MI300X"])] },
    allowedTiers: [1, 4],
    trustedRootPem: pki.root.pem,
    seed: (bus) => approveMeasurements(bus, [{ id: "llama-t4", mrtd: MRTD, tier: 4 }]),
  });
  project = mkdtempSync(join(tmpdir(), "zml-sdk-user-"));
  const packed = [];
  for (const pkg of ["libs/client", "libs/cli"]) {
    const { stdout } = await sh(
      [...npm, "pack", "--pack-destination", project, "--silent"],
      join(root, pkg),
    );
    packed.push(join(project, stdout.trim().split("\n").at(-1)!));
  }
  writeFileSync(
    join(project, "package.json"),
    JSON.stringify({ name: "zml-user", private: true, type: "module" }),
  );
  // Offline: both packages must install from their tarballs alone.
  await sh([...npm, "install", "--offline", "--no-audit", "--no-fund", ...packed], project);
  await waitForStatus(stack, "Active");
  await waitForResult(stack, "t4-a", (r) => r.ok, "attested");
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  if (project) rmSync(project, { recursive: true, force: true });
});

describe("the packed TypeScript SDK", () => {
  it("installs without the repository: built JavaScript and declarations only", () => {
    const installed = join(project, "node_modules/@zml/client");
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as {
      exports: Record<string, { types: string; default: string }>;
      dependencies?: Record<string, string>;
    };
    expect(manifest.exports["."]).toEqual({
      types: "./dist/index.d.ts",
      default: "./dist/index.js",
    });
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(project.startsWith(root)).toBe(false);
    // The bundle carries third-party code; their licences travel with it.
    const notices = readFileSync(join(installed, "dist/THIRD-PARTY-NOTICES.txt"), "utf8");
    for (const bundled of ["structured-headers", "asn1js"]) {
      expect(notices).toMatch(
        new RegExp(`^${bundled}@\\d+\\.\\d+\\.\\d+ \\((MIT|BSD-3-Clause)\\)$`, "m"),
      );
    }
  });

  it("runs the README example, type-checked, and routing names the node that got the payload", async () => {
    writeFileSync(
      join(project, "example.ts"),
      readmeBlock("libs/client/README.md", "First call", "ts"),
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "es2022",
          module: "nodenext",
          strict: true,
          noEmit: true,
          allowImportingTsExtensions: true,
          // The consumer's own @types/node: borrowed from the repository, not the SDK's.
          typeRoots: [join(root, "node_modules/@types")],
          types: ["node"],
        },
        include: ["example.ts"],
      }),
    );
    await sh([process.execPath, join(root, "node_modules/typescript/bin/tsc"), "-p", "."], project);

    const before = payloads();
    const { stdout } = await sh([process.execPath, "example.ts"], project, {
      ZML_BASE_URL: stack.intakeUrl,
      ZML_API_KEY: API_KEY,
      ZML_TEE_ROOT_PEM_FILE: stack.trustedRootPemFile!,
    });
    const lines = stdout.split("\n");
    const routed = lines.find((l) => l.startsWith("routing "))!.split(" ");
    const streamed = lines
      .find((l) => l.startsWith("stream routed to "))!
      .split(" ")
      .at(-1)!;
    const jobs = lines.filter((l) => l.startsWith("job "));
    const session = lines.find((l) => l.startsWith("session "))!.split(" ");
    // routing h100-a H100 <decision id>: `interactive` prefers H100.
    expect(routed.slice(1, 3)).toEqual(["h100-a", "H100"]);
    expect(routed[3]).toMatch(/.+/);
    expect(lines).toContain("error 403 tier_not_allowed tier");
    expect(jobs).toHaveLength(2);
    for (const job of jobs) expect(job).toMatch(/^job \S+ done (h100-a|mi300x-a)$/);
    // The session opened on the attested tier-4 node, and its request went there.
    expect(session.slice(1)).toEqual(["t4-a", "t4-a", "1"]);
    // Every payload the nodes received is accounted for by a routing the SDK reported.
    const reported = [routed[1]!, streamed, ...jobs.map((j) => j.split(" ").at(-1)!), session[2]!];
    const now = payloads();
    const received = Object.fromEntries(
      Object.keys(now)
        .filter((id) => now[id] !== before[id])
        .map((id) => [id, now[id]! - before[id]!]),
    );
    const expected: Record<string, number> = {};
    for (const node of reported) expected[node] = (expected[node] ?? 0) + 1;
    expect(received).toEqual(expected);
  });
});

describe("the packed CLI", () => {
  it("carries the licences of the packages bundled into it", () => {
    const installed = join(project, "node_modules/@zml/cli");
    const notices = readFileSync(join(installed, "dist/THIRD-PARTY-NOTICES.txt"), "utf8");
    for (const bundled of ["@nats-io/nats-core", "zod", "yaml"]) {
      expect(notices).toContain(`\n${bundled}@`);
    }
  });

  it("runs the README example from the installed bin against the stack's NATS", async () => {
    writeFileSync(join(project, "fleet.yaml"), JSON.stringify(stack.fleet));
    const lines = readmeBlock("libs/cli/README.md", "Example", "sh").trim().split("\n");
    expect(lines).toHaveLength(3);
    const outputs: string[] = [];
    for (const line of lines) {
      const { stdout } = await sh(["bash", "-c", line], project, {
        // The CLI connects as the admin identity (libs/cli/README.md), over TLS.
        ...stack.nats.serviceEnv("admin"),
        // The stack's nodes are on this host, which `zml apply` refuses unless allowed.
        ZML_NODE_ALLOW_LOOPBACK: "true",
        // The installed bin runs on whatever `node` the user has: here the workspace's.
        PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`,
      });
      outputs.push(stdout);
    }
    const [nodes, policies, dryRun] = outputs;
    expect(nodes).toMatch(/h100-a\s+H100\s+.*Active/);
    expect(nodes).toMatch(/mi300x-a\s+MI300X/);
    const listed = JSON.parse(policies!) as Array<{
      policy: { name: string };
      chain: Array<{ family: string; active: number; total: number }>;
    }>;
    expect(listed.find((p) => p.policy.name === "interactive")?.chain).toEqual([
      { family: "H100", active: 1, total: 1 },
      { family: "MI300X", active: 1, total: 1 },
    ]);
    // The fleet as applied: a dry run finds nothing to change.
    expect(dryRun).toMatch(/^no changes/);
  });
});
