// The README's run command, run exactly as a newcomer types it: `./deploy/dev/up.sh`, as a
// child process in its own process group (as a terminal runs a job), on free ports so it can
// run beside other tests. Ctrl-C is a SIGINT to that group, as the terminal sends it.
import { execFile, spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { parseRoutingHeader } from "@zml/contracts";
import { pollUntil, repoRoot } from "@zml/harness";

const root = repoRoot();
const UP = "./deploy/dev/up.sh";
const FREE_PORTS = {
  ZML_PORT: "0",
  ZML_NATS_PORT: "0",
  DISPATCHER_OPS_PORT: "0",
  AGGREGATOR_OPS_PORT: "0",
  ATTESTATION_OPS_PORT: "0",
  ZML_SIM_PORT_BASE: "0",
};

interface Launcher {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running: Launcher[] = [];
afterEach(() => {
  for (const l of running.splice(0)) {
    if (l.child.exitCode === null && l.child.pid !== undefined) {
      try {
        process.kill(-l.child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
});

/** The environment a newcomer has: none of the project's settings, only what the test moves. */
function cleanEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || /^(ZML_|NATS_URL$|DISPATCHER_|AGGREGATOR_|ATTESTATION_)/.test(k))
      continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

function launch(extra: Record<string, string>): Launcher {
  const child = spawn(UP, [], {
    cwd: root,
    env: cleanEnv(extra),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on("line", (line) => (text += `${line}\n`));
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("close", (code, signal) => resolve({ code, signal })),
  );
  const launcher = { child, output: () => text, exited };
  running.push(launcher);
  return launcher;
}

async function waitForServing(l: Launcher): Promise<void> {
  const serving = pollUntil(() => l.output().includes("ZML is serving."), {
    timeoutMs: 90_000,
    intervalMs: 100,
    message: "the 'ZML is serving' line",
  });
  const exitedFirst = l.exited.then(({ code, signal }) => {
    throw new Error(`up.sh exited (${code ?? signal}) before serving:\n${l.output()}`);
  });
  await Promise.race([serving, exitedFirst]);
}

/** A value the launcher printed, e.g. `intake URL   http://…`. */
function printed(l: Launcher, label: string): string {
  const match = new RegExp(`^  ${label}\\s+(\\S+)`, "m").exec(l.output());
  if (!match) throw new Error(`up.sh printed no '${label}':\n${l.output()}`);
  return match[1]!;
}

/** Every process below `pid`, from /proc (the launcher's nats-server, nodes and services). */
function descendants(pid: number): number[] {
  const ps = spawnSync("ps", ["-eo", "pid=,ppid="], { encoding: "utf8" }).stdout;
  const children = new Map<number, number[]>();
  for (const line of ps.trim().split("\n")) {
    const [p, pp] = line.trim().split(/\s+/).map(Number) as [number, number];
    children.set(pp, [...(children.get(pp) ?? []), p]);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function chat(url: string, key: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** The README's fenced code blocks of one language, in order. */
function readmeBlocks(lang: string): string[] {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  return [...readme.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "gm"))].map(
    (m) => m[1]!,
  );
}

const README_URL = "http://127.0.0.1:8080";

function run(
  command: string,
  args: string[],
  cwd: string,
  env: Record<string, string> = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const options = { cwd, timeout: 30_000, env: { ...process.env, ...env } };
    execFile(command, args, options, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} failed: ${error.message}\n${stdout}${stderr}`));
      else resolve(stdout);
    });
  });
}

async function runReadmeShell(snippet: string, url: string): Promise<string> {
  return run("bash", ["-c", snippet.replaceAll(README_URL, url)], root);
}

/** Runs a README TypeScript example as a module inside test/, where its imports resolve. */
async function runReadmeTs(snippet: string, url: string): Promise<string> {
  expect(snippet).toContain(README_URL);
  const dir = join(root, "test", ".tmp");
  await mkdir(dir, { recursive: true });
  const file = join(dir, `readme-example-${process.pid}-${Date.now()}.ts`);
  await writeFile(file, snippet.replaceAll(README_URL, url));
  try {
    return await run(process.execPath, [file], dir);
  } finally {
    await rm(file, { force: true });
  }
}

/** Runs a README Python example on Debian's Python with the SDK from libs/python-sdk. */
async function runReadmePython(snippet: string, url: string): Promise<string> {
  expect(snippet).toContain(README_URL);
  const env = { PYTHONPATH: join(root, "libs/python-sdk/src") };
  return run("/usr/bin/python3", ["-c", snippet.replaceAll(README_URL, url)], root, env);
}

async function ctrlC(l: Launcher) {
  process.kill(-l.child.pid!, "SIGINT");
  return l.exited;
}

describe("the README's run command (./deploy/dev/up.sh)", { timeout: 120_000 }, () => {
  it("serves the demo fleet with the printed key, and Ctrl-C stops every process it started", async () => {
    const l = launch(FREE_PORTS);
    await waitForServing(l);
    const url = printed(l, "intake URL");
    const key = printed(l, "API key");
    expect(printed(l, "admin token")).toMatch(/^zml-dev-.{16,}$/);

    const messages = [{ role: "user", content: "Hello" }];
    const res = await chat(url, key, { model: "llama-3.1-8b-instruct", messages });
    expect(res.status).toBe(200);
    const completion = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(completion.choices[0]!.message.content.length).toBeGreaterThan(0);
    const routing = parseRoutingHeader(res.headers.get("x-zml-routing") ?? "");
    expect(routing.node).toMatch(/^(h100|mi300x)-/);
    expect(routing.attempts).toBe(1);

    const streamed = await chat(url, key, {
      model: "llama-3.1-8b-instruct",
      messages,
      stream: true,
    });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get("content-type")).toContain("text/event-stream");
    expect(parseRoutingHeader(streamed.headers.get("x-zml-routing") ?? "").node).toBeTruthy();
    const sse = await streamed.text();
    expect(sse.trimEnd().endsWith("data: [DONE]")).toBe(true);

    // What the README and the launcher tell a newcomer to type, verbatim but for the port.
    const curl = await runReadmeShell(readmeBlocks("sh")[1]!, url);
    expect(curl).toMatch(/^HTTP\/1\.1 200/);
    expect(curl).toMatch(/^x-zml-routing: decision-id=/m);
    const [openaiExample, sdkExample] = readmeBlocks("ts");
    const openaiOut = await runReadmeTs(openaiExample!, url);
    expect(openaiOut).toMatch(/ decision-id="[^"]+", node="/);
    const sdkOut = await runReadmeTs(sdkExample!, url);
    expect(sdkOut).toMatch(/ (h100|mi300x)-\w+ 1\n$/);
    const [pythonExample] = readmeBlocks("python");
    const pythonOut = await runReadmePython(pythonExample!, url);
    expect(pythonOut).toMatch(/ (h100|mi300x)-\w+ 1\n$/);
    const cli = /fleet CLI\s+((?:NATS_\w+=\S+ )*npm run zml -- get nodes --nats \S+)/.exec(
      l.output(),
    )![1]!;
    const nodes = await runReadmeShell(cli, url);
    for (const id of ["h100-a", "h100-b", "mi300x-a", "mi300x-b", "a100-tgi"]) {
      expect(nodes).toContain(id);
    }

    const tree = descendants(l.child.pid!);
    const commands = tree.map(commandOf).join("\n");
    expect(commands).toContain("nats-server");
    for (const svc of ["intake", "dispatcher", "health-aggregator", "attestation"]) {
      expect(commands).toContain(`services/${svc}/src/main.ts`);
    }
    expect(commands.match(/node-sim\/src\/cli\.ts/g)).toHaveLength(5);

    const { code, signal } = await ctrlC(l);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(tree.filter(alive)).toEqual([]);
    // Nothing else of its process group is left either.
    const group = spawnSync("pgrep", ["-g", String(l.child.pid)], { encoding: "utf8" }).stdout;
    expect(group.trim()).toBe("");
  });

  it("serves a user's own fleet (ZML_FLEET_FILE) and reports the nodes it cannot start", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-up-fleet-"));
    const fleetFile = join(dir, "fleet.yaml");
    await writeFile(
      fleetFile,
      [
        "apiVersion: zml/v1",
        "nodes:",
        "  - id: solo",
        "    endpoint: http://127.0.0.1:18999",
        "    framework: vllm",
        "    accelerator_family: L4",
        "    tier: 1",
        "    models: [m1]",
        "  - id: far-away",
        "    endpoint: https://inference.example.invalid:8443",
        "    framework: vllm",
        "    accelerator_family: H100",
        "    tier: 1",
        "    models: [m2]",
        "models:",
        "  - id: m1",
        "  - id: m2",
        "",
      ].join("\n"),
    );
    const l = launch({ ...FREE_PORTS, ZML_FLEET_FILE: fleetFile });
    await waitForServing(l);
    expect(l.output()).toMatch(/remote node\s+far-away .*not started by up\.sh/);
    expect(l.output()).toContain('added account "demo"');

    const res = await chat(printed(l, "intake URL"), printed(l, "API key"), {
      model: "m1",
      messages: [{ role: "user", content: "Hello" }],
    });
    expect(res.status).toBe(200);
    expect(parseRoutingHeader(res.headers.get("x-zml-routing") ?? "").node).toBe("solo");
    await res.arrayBuffer();
    expect((await ctrlC(l)).code).toBe(0);
  });

  it("refuses a bad setting with a message for a person, before starting anything", async () => {
    const l = launch({ ...FREE_PORTS, ZML_ADMIN_TOKEN: "too-short", ZML_PORT: "http" });
    const { code } = await l.exited;
    expect(code).toBe(78);
    const out = l.output();
    expect(out).toContain("up: cannot start, the configuration is invalid:");
    expect(out).toMatch(/ZML_ADMIN_TOKEN: at least 16 characters\n\s+→ set ZML_ADMIN_TOKEN to/);
    expect(out).toMatch(/ZML_PORT: .*\n\s+→ correct ZML_PORT/);
    expect(out).not.toMatch(/^\s+at /m);
    expect(out).not.toContain("nats-server ");
  });
});

describe("every service's configuration errors", () => {
  const services = {
    intake: { ZML_ADMIN_TOKEN: "zml-demo-admin" },
    dispatcher: { DISPATCH_CONNECT_TIMEOUT_MS: "soon" },
    "health-aggregator": { POLL_JITTER: "2" },
    attestation: { ATTESTATION_TCB_STATUSES: "Fine" },
  };
  for (const [service, bad] of Object.entries(services)) {
    const [setting] = Object.keys(bad) as [string];
    it(`${service}: names ${setting}, says what to do, exits 78 without a stack`, () => {
      const result = spawnSync(process.execPath, [join(root, `services/${service}/src/main.ts`)], {
        env: cleanEnv({ ...bad, LOG_LEVEL: "fatal", NATS_URL: "nats://127.0.0.1:1" }),
        encoding: "utf8",
        timeout: 30_000,
      });
      expect(result.status).toBe(78);
      expect(result.stderr).toContain(
        `zml-${service}: cannot start, the configuration is invalid:`,
      );
      expect(result.stderr).toMatch(new RegExp(`  ${setting}: .+\\n    → .+`));
      expect(result.stderr).not.toMatch(/^\s+at /m);
    });
  }

  it("dispatcher: an unreadable secrets file is a configuration error on its setting", () => {
    const result = spawnSync(process.execPath, [join(root, "services/dispatcher/src/main.ts")], {
      // An identity (never read: the secrets file is read first) so the config itself is valid.
      env: cleanEnv({
        ZML_NODE_SECRETS_FILE: "/nonexistent/secrets.json",
        NATS_NKEY_SEED_FILE: "/nonexistent/dispatcher.nk",
        LOG_LEVEL: "fatal",
      }),
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(result.status).toBe(78);
    expect(result.stderr).toContain(
      "ZML_NODE_SECRETS_FILE: cannot read /nonexistent/secrets.json (ENOENT)",
    );
  });
});
