// The README's run command, run exactly as a newcomer types it: `./deploy/dev/up.sh`, as a
// child process in its own process group (as a terminal runs a job), on free ports so it can
// run beside other tests. Ctrl-C is a SIGINT to that group, as the terminal sends it. The
// seal-proxy command it prints for tier 4 is run the same way, as pasted into another shell.
import { execFile, spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { existsSync, readFileSync, statSync } from "node:fs";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterEach, describe, expect, it } from "vitest";
import {
  ALL_KV_BUCKETS,
  JOB_STREAMS,
  KV_BUCKETS,
  parseRoutingHeader,
  ROUTING_HTTP_HEADER,
} from "@zml/contracts";
import { pollUntil, repoRoot, startNatsServer } from "@zml/harness";
import { readChatStream } from "../support/chat-stream.ts";

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

const TIER4_MODEL = "llama-3.1-8b-instruct-confidential";
const TIER4_NODE = "tdx-h100-a";
/** Where the README (and the printed command) has the seal proxy listen. */
const README_SEAL_PROXY = "http://127.0.0.1:8787";

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
    if (
      v === undefined ||
      /^(ZML_|NATS_URL$|NATS_INSECURE$|DISPATCHER_|AGGREGATOR_|ATTESTATION_)/.test(k)
    )
      continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

/**
 * up.sh runs bootstrap.sh, which runs `npm ci` unless its install stamp is at least as new as
 * the lock file: that would replace node_modules under the running tests, so a launch is
 * refused instead (bootstrap, as test.sh does, makes the stamp).
 */
function assertNoReinstall(): void {
  const stamp = join(root, "node_modules/.zml-installed");
  const fresh =
    existsSync(stamp) &&
    existsSync(join(root, "node_modules/.bin/node")) &&
    statSync(stamp).mtimeMs >= statSync(join(root, "package-lock.json")).mtimeMs;
  if (!fresh) {
    throw new Error(
      "up.sh would reinstall node_modules (npm ci) under the running tests: run `bash deploy/dev/bootstrap.sh --for-tests` first",
    );
  }
}

function launch(extra: Record<string, string>): Launcher {
  assertNoReinstall();
  return spawnGroup(UP, [], cleanEnv(extra));
}

/** A command in its own process group, as a shell runs a job; killed after each test. */
function spawnGroup(command: string, args: string[], env: Record<string, string>): Launcher {
  const child = spawn(command, args, {
    cwd: root,
    env,
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

async function runReadmeShell(snippet: string, url: string, readmeUrl = README_URL) {
  return run("bash", ["-c", snippet.replaceAll(readmeUrl, url)], root);
}

/** Runs a README TypeScript example as a module inside test/, where its imports resolve. */
async function runReadmeTs(snippet: string, url: string, readmeUrl = README_URL) {
  expect(snippet).toContain(readmeUrl);
  const dir = join(root, "test", ".tmp");
  await mkdir(dir, { recursive: true });
  const file = join(dir, `readme-example-${process.pid}-${Date.now()}.ts`);
  await writeFile(file, snippet.replaceAll(readmeUrl, url));
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

/** Nothing of a process group is left. */
function groupGone(l: Launcher): boolean {
  return spawnSync("pgrep", ["-g", String(l.child.pid)], { encoding: "utf8" }).stdout.trim() === "";
}

/** The `zml seal-proxy` command the launcher printed, with its continuation lines. */
function printedSealProxyCommand(l: Launcher): string {
  const lines = l.output().split("\n");
  const start = lines.findIndex((line) => line.startsWith("  npm run zml -- seal-proxy "));
  if (start < 0) throw new Error(`up.sh printed no seal-proxy command:\n${l.output()}`);
  let end = start;
  while (lines[end]!.endsWith("\\")) end++;
  return lines
    .slice(start, end + 1)
    .map((line) => line.trim())
    .join("\n");
}

/** The value of `--<flag>` in a printed command. */
function flagOf(command: string, flag: string): string {
  const match = new RegExp(`--${flag} (\\S+)`).exec(command);
  if (!match) throw new Error(`no --${flag} in ${command}`);
  return match[1]!;
}

/**
 * Runs the printed seal-proxy command as pasted into a shell (on a free port instead of the
 * fixed one, as the tests run beside others) and waits for its ready line: its base URL.
 */
async function startSealProxy(command: string): Promise<{ proxy: Launcher; url: string }> {
  const pasted = command.replace("--listen 127.0.0.1:8787", "--listen 127.0.0.1:0");
  expect(pasted).not.toBe(command);
  const proxy = spawnGroup("bash", ["-c", pasted], cleanEnv({}));
  const ready = /^zml seal-proxy: serving (\S+) end to end at (http:\/\/127\.0\.0\.1:\d+)\/v1$/m;
  const serving = pollUntil(() => ready.exec(proxy.output()) ?? undefined, {
    timeoutMs: 60_000,
    intervalMs: 100,
    message: "the seal proxy's ready line",
  });
  const exitedFirst = proxy.exited.then(({ code, signal }) => {
    throw new Error(`seal proxy exited (${code ?? signal}) before serving:\n${proxy.output()}`);
  });
  const match = await Promise.race([serving, exitedFirst]);
  expect(match[1]).toBe(flagOf(command, "model"));
  return { proxy, url: match[2]! };
}

const HAS_CURL = spawnSync("which", ["curl"]).status === 0;

/** Status, routing header and body of an `-i` answer: curl's output, or fetch's. */
interface Answer {
  status: number;
  routing: string;
  contentType: string;
  body: string;
}

function parseCurlI(out: string): Answer {
  const split = out.indexOf("\r\n\r\n");
  const head = out.slice(0, split).split("\r\n");
  const header = (name: string) =>
    head
      .find((h) => h.toLowerCase().startsWith(`${name}:`))
      ?.slice(name.length + 1)
      .trim() ?? "";
  return {
    status: Number(/^HTTP\/[\d.]+ (\d{3})/.exec(head[0] ?? "")?.[1]),
    routing: header(ROUTING_HTTP_HEADER),
    contentType: header("content-type"),
    body: out.slice(split + 4),
  };
}

/**
 * The README's curl through the seal proxy (streamed: with `"stream":true` added), with the
 * real curl binary when there is one, else the same request with fetch.
 */
async function readmeCurl(snippet: string, base: string, stream: boolean): Promise<Answer> {
  const data = /-d '([^']+)'/.exec(snippet)![1]!;
  const body = stream ? data.replace('{"model"', '{"stream":true,"model"') : data;
  if (HAS_CURL) {
    const command = snippet
      .replace(data, body)
      .replace("curl -i", stream ? "curl -sNi" : "curl -si");
    return parseCurlI(await runReadmeShell(command, base, README_SEAL_PROXY));
  }
  const url = /curl -i (\S+)/.exec(snippet)![1]!.replace(README_SEAL_PROXY, base);
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  return {
    status: res.status,
    routing: res.headers.get(ROUTING_HTTP_HEADER) ?? "",
    contentType: res.headers.get("content-type") ?? "",
    body: await res.text(),
  };
}

/** The README's tier-4 examples, and the openai SDK plain and streamed, through the proxy. */
async function checkTier4ThroughSealProxy(base: string): Promise<void> {
  const curlSnippet = readmeBlocks("sh").find((b) => b.includes(`${README_SEAL_PROXY}/v1/chat`))!;
  const plain = await readmeCurl(curlSnippet, base, false);
  expect(plain.status).toBe(200);
  expect(parseRoutingHeader(plain.routing)).toMatchObject({ node: TIER4_NODE, tier: 4 });
  const completion = JSON.parse(plain.body) as {
    model: string;
    choices: Array<{ message: { content: string } }>;
  };
  expect(completion.model).toBe(TIER4_MODEL);
  expect(completion.choices[0]!.message.content.length).toBeGreaterThan(0);
  const streamed = await readmeCurl(curlSnippet, base, true);
  expect(streamed.status).toBe(200);
  expect(streamed.contentType).toContain("text/event-stream");
  expect(parseRoutingHeader(streamed.routing).node).toBe(TIER4_NODE);
  expect(streamed.body).toContain('"delta":{"content":');
  expect(streamed.body.trimEnd().endsWith("data: [DONE]")).toBe(true);

  // The official openai SDK with only its base URL changed (the seal proxy holds the key).
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  const messages = [{ role: "user" as const, content: "Hello" }];
  const { data, response } = await client.chat.completions
    .create({ model: TIER4_MODEL, messages })
    .withResponse();
  expect(data.choices[0]?.message.content).toBeTruthy();
  const routing = parseRoutingHeader(response.headers.get(ROUTING_HTTP_HEADER)!);
  expect(routing).toMatchObject({ node: TIER4_NODE, tier: 4, attempts: 1 });
  const { data: stream, response: streamResponse } = await client.chat.completions
    .create({ model: TIER4_MODEL, messages, stream: true })
    .withResponse();
  expect(parseRoutingHeader(streamResponse.headers.get(ROUTING_HTTP_HEADER)!).node).toBe(
    TIER4_NODE,
  );
  const { text, chunks } = await readChatStream(stream);
  expect(chunks).toBeGreaterThan(2);
  expect(text).toBe(data.choices[0]!.message.content);

  // The README's openai example, verbatim but for the port.
  const example = readmeBlocks("ts").find((b) => b.includes(README_SEAL_PROXY))!;
  const out = await runReadmeTs(example, base, README_SEAL_PROXY);
  expect(out).toContain(`node="${TIER4_NODE}"`);
  expect(out).toContain("tier=4");
}

describe("the README's run command (./deploy/dev/up.sh)", { timeout: 180_000 }, () => {
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
    for (const id of ["h100-a", "h100-b", "mi300x-a", "mi300x-b", "a100-tgi", TIER4_NODE]) {
      expect(nodes).toContain(id);
    }

    // Tier 4: the node is a TD proxy (https) in front of a simulator, and the printed
    // seal-proxy command serves the tier-4 model end to end.
    expect(l.output()).toMatch(
      new RegExp(
        `simulated node  ${TIER4_NODE} H100    https://127\\.0\\.0\\.1:\\d+   \\(tier 4: a TD proxy`,
      ),
    );
    const sealCommand = printedSealProxyCommand(l);
    expect(flagOf(sealCommand, "gateway")).toBe(url);
    expect(flagOf(sealCommand, "api-key")).toBe(key);
    expect(flagOf(sealCommand, "model")).toBe(TIER4_MODEL);
    expect(sealCommand).toContain("--listen 127.0.0.1:8787");
    const rootPem = flagOf(sealCommand, "trust-test-root");
    expect(rootPem).toMatch(/\/root\.pem$/);
    expect(readFileSync(rootPem, "utf8")).toContain("BEGIN CERTIFICATE");
    expect(l.output()).toMatch(
      /TEST root, which only its simulated TEE nodes \(tdx-h100-a\)\s+chain to;/,
    );
    const sealProxy = await startSealProxy(sealCommand);
    await checkTier4ThroughSealProxy(sealProxy.url);

    const tree = descendants(l.child.pid!);
    const commands = tree.map(commandOf).join("\n");
    expect(commands).toContain("nats-server");
    for (const svc of ["intake", "dispatcher", "health-aggregator", "attestation"]) {
      expect(commands).toContain(`services/${svc}/src/main.ts`);
    }
    expect(commands.match(/node-sim\/src\/cli\.ts/g)).toHaveLength(6);
    expect(commands.match(/td-proxy\/src\/main\.ts/g)).toHaveLength(1);

    // Ctrl-C in the seal proxy's shell, then in up.sh's: nothing of either is left.
    const sealTree = descendants(sealProxy.proxy.child.pid!);
    expect(sealTree.map(commandOf).join("\n")).toContain("seal-proxy");
    await ctrlC(sealProxy.proxy);
    expect(sealTree.filter(alive)).toEqual([]);
    expect(groupGone(sealProxy.proxy)).toBe(true);

    const { code, signal } = await ctrlC(l);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(tree.filter(alive)).toEqual([]);
    // Nothing else of its process group is left either, nor this run's test root.
    expect(groupGone(l)).toBe(true);
    expect(existsSync(rootPem)).toBe(false);
  });

  it("adds a real llama.cpp node with ZML_REAL_NODE=llamacpp, and Ctrl-C stops it", async () => {
    const l = launch({ ...FREE_PORTS, ZML_REAL_NODE: "llamacpp" });
    await waitForServing(l);
    expect(l.output()).toMatch(/^real node\s+llamacpp-a\s+CPU\s+http:\/\/127\.0\.0\.1:\d+ /m);
    const url = printed(l, "intake URL");
    const key = printed(l, "API key");
    // Routable once the aggregator's first poll found it Active.
    const res = await pollUntil(
      async () => {
        const r = await chat(url, key, {
          model: "tiny-llama",
          messages: [{ role: "user", content: "Hello" }],
          max_tokens: 8,
        });
        return r.status === 200 ? r : (await r.arrayBuffer(), undefined);
      },
      { timeoutMs: 20_000, intervalMs: 250, message: "tiny-llama answered" },
    );
    expect(parseRoutingHeader(res.headers.get(ROUTING_HTTP_HEADER) ?? "")).toMatchObject({
      node: "llamacpp-a",
      family: "CPU",
      attempts: 1,
    });
    // llama.cpp's own answer: its fingerprint and its usage details.
    expect(await res.json()).toMatchObject({
      system_fingerprint: "b1-80fb11a",
      usage: { completion_tokens: 8, prompt_tokens_details: { cached_tokens: 0 } },
    });
    const tree = descendants(l.child.pid!);
    expect(tree.map(commandOf).join("\n")).toContain("llama-server");
    const { code, signal } = await ctrlC(l);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(tree.filter(alive)).toEqual([]);
  });

  it("serves a user's own fleet (ZML_FLEET_FILE), its tier-4 loopback node behind a TD proxy, and reports the nodes it cannot start", async () => {
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
        "  - id: enclave",
        "    endpoint: http://127.0.0.1:18998",
        "    framework: vllm",
        "    accelerator_family: H100",
        "    tier: 4",
        "    models: [m3]",
        "models:",
        "  - id: m1",
        "  - id: m2",
        "  - id: m3",
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

    // The tier-4 loopback node: a TD proxy (https) in front of a simulator, its measurement
    // approved for m3, so a session opens on it at once; the printed command names it.
    expect(l.output()).toMatch(
      /simulated node {2}enclave +H100 +https:\/\/127\.0\.0\.1:\d+ .*TD proxy/,
    );
    expect(l.output()).toMatch(/approved mrtd \w+… .* for m3 at tier 4/);
    expect(flagOf(printedSealProxyCommand(l), "model")).toBe("m3");
    const session = await fetch(`${printed(l, "intake URL")}/v1/sessions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${printed(l, "API key")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "m3" }),
    });
    expect(session.status).toBe(201);
    expect(((await session.json()) as { node_id: string }).node_id).toBe("enclave");

    expect((await ctrlC(l)).code).toBe(0);
    expect(groupGone(l)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it("runs on the user's own nats-server (NATS_URL with NATS_INSECURE=1), makes every stream and bucket there, and leaves it running", async () => {
    // An open server with JetStream, as a user would run one: this test's own, never one that
    // NATS_URL names for the test run. (ZML_NATS_PORT is ignored with NATS_URL.)
    await using nats = await startNatsServer({ env: { PATH: process.env.PATH }, security: "open" });
    const l = launch({ ...FREE_PORTS, NATS_URL: nats.url, NATS_INSECURE: "1" });
    await waitForServing(l);
    expect(l.output()).toContain(`nats-server     ${nats.url}   (NATS_URL, without identities`);
    // Each service says loudly that it runs on an open bus.
    for (const svc of ["intake", "dispatcher", "health-aggregator", "attestation"]) {
      expect(l.output()).toMatch(new RegExp(`^\\[${svc}\\] .*"msg":"INSECURE: `, "m"));
    }

    const res = await chat(printed(l, "intake URL"), printed(l, "API key"), {
      model: "llama-3.1-8b-instruct",
      messages: [{ role: "user", content: "Hello" }],
    });
    expect(res.status).toBe(200);
    expect(parseRoutingHeader(res.headers.get(ROUTING_HTTP_HEADER) ?? "").node).toMatch(
      /^(h100|mi300x)-/,
    );
    await res.arrayBuffer();

    // On the test's server: every bucket and stream, and the fleet applied into them.
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const streams: string[] = [];
      for await (const name of jsm.streams.names()) streams.push(name);
      expect(streams.sort()).toEqual(
        [...ALL_KV_BUCKETS.map((b) => `KV_${b}`), ...Object.values(JOB_STREAMS)].sort(),
      );
      const nodes = await new Kvm(nc).open(KV_BUCKETS.nodes);
      expect(await nodes.get("h100-a")).toBeTruthy();
      // No server of its own.
      const tree = descendants(l.child.pid!);
      expect(tree.map(commandOf).join("\n")).not.toContain("nats-server");

      const { code, signal } = await ctrlC(l);
      expect({ code, signal }).toEqual({ code: 0, signal: null });
      expect(groupGone(l)).toBe(true);
      // The user's server is theirs: still serving after the launcher stopped.
      expect((await jsm.streams.info(JOB_STREAMS.jobs)).config.name).toBe(JOB_STREAMS.jobs);
    } finally {
      await nc.close();
    }
  });

  it("refuses NATS_URL without NATS_INSECURE=1: it has no identities for that server", async () => {
    const l = launch({ ...FREE_PORTS, NATS_URL: "nats://127.0.0.1:1" });
    const { code } = await l.exited;
    expect(code).toBe(78);
    expect(l.output()).toMatch(
      /NATS_INSECURE: required with NATS_URL: the launcher has no bus identities for that server\n\s+→ set NATS_INSECURE=1/,
    );
    expect(l.output()).not.toContain("nats-server ");
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
