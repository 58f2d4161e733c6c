// Real llama.cpp nodes behind the real services: three unmodified `llama-server` processes (the
// binary deploy/dev/llama-server.sh builds and caches; test.sh builds it first), each serving
// the project's tiny random-weight llama, registered as `framework: llamacpp`. A recording
// proxy in front of each server keeps the exact bytes the server wrote, to compare with what
// the client got. Nothing here is simulated: wire format, errors, metrics, /health and /slots
// are llama.cpp's own.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KV_BUCKETS, NodeStateSchema } from "@zml/contracts";
import type { NodeSpec, NodeState, PolicySpec } from "@zml/contracts";
import { openKv } from "@zml/bus";
import { findFreePort, pollUntil, repoRoot } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { findLlamaServer, startLlamaServer, tinyLlamaGguf } from "@zml/llamacpp";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { startRecordingProxy } from "../support/recording-proxy.ts";
import type { RecordingProxy } from "../support/recording-proxy.ts";
import { runCommand } from "../support/run-command.ts";
import { startStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/** Served by every node. */
const ANY = "tiny-llama";
/** Served by llama-a only: one conversation's turns all reach one node. */
const ONLY_A = "tiny-llama-a";
/** Served by llama-c first (family EDGE), then llama-a (family CPU). */
const C_THEN_A = "tiny-llama-c-then-a";
/** Served by the node whose server is still loading its model. */
const LOADING = "tiny-llama-loading";

// Each server's context is 4096 tokens split over 2 slots: 2048 per request.
const CONTEXT = 4096;
const SLOTS = 2;

interface LlamaNode {
  id: string;
  port: number;
  proxy: RecordingProxy;
  server: ManagedProcess | undefined;
}

let dir: string;
let binary: string;
let modelPath: string;
let stack: Stack;
const nodes = new Map<string, LlamaNode>();

const startServer = (node: LlamaNode, model = modelPath, waitUntilLoaded = true) =>
  startLlamaServer({
    name: node.id,
    binary,
    model,
    port: node.port,
    alias: ANY,
    contextSize: CONTEXT,
    slots: SLOTS,
    threads: 1,
    waitUntilLoaded,
  });

function spec(node: LlamaNode, family: string, models: string[], index: number): NodeSpec {
  return {
    id: node.id,
    endpoint: node.proxy.url,
    framework: "llamacpp",
    accelerator_family: family,
    tier: 1,
    models,
    apis: ["chat", "completions"],
    max_concurrency: 4,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: index,
  };
}

/** Fails over at once; a generous target, since a new node has no latency history yet. */
const policy = (name: string, families: string[]): PolicySpec => ({
  name,
  accelerator_preference: families.map((family, i) => ({ family, priority: i + 1 })),
  latency_target_ms: 60_000,
  cost_priority: "latency",
  queue_on_saturation: false,
  max_queue_ms: 0,
});

async function state(id: string): Promise<NodeState | undefined> {
  const entry = await (await openKv(stack.bus, KV_BUCKETS.nodeState)).get(id);
  return entry?.operation === "PUT" ? NodeStateSchema.parse(entry.json()) : undefined;
}

async function waitForState(
  id: string,
  check: (s: NodeState) => boolean,
  message: string,
  timeoutMs = 20_000,
): Promise<NodeState> {
  return pollUntil(
    async () => {
      const s = await state(id);
      return s !== undefined && check(s) ? s : undefined;
    },
    { timeoutMs, intervalMs: 50, message: `${id}: ${message}` },
  );
}

const posts = () =>
  [...nodes.values()].flatMap((n) => n.proxy.answers.filter((a) => a.request.startsWith("POST")));

beforeAll(async () => {
  // Never skipped: without the binary this fails, saying how to build it.
  binary = findLlamaServer(process.env);
  dir = await mkdtemp(join(tmpdir(), "zml-llamacpp-"));
  modelPath = join(dir, "tiny-llama.gguf");
  await writeFile(modelPath, tinyLlamaGguf({ seed: 7 }));
  // A server given a FIFO for a model blocks in its load (opening the FIFO waits for a
  // writer), answering 503 "Loading model" meanwhile: a server that is still loading.
  const fifo = join(dir, "loading.gguf");
  execFileSync("mkfifo", [fifo]);

  for (const id of ["llama-a", "llama-b", "llama-c", "llama-loading"]) {
    const port = await findFreePort();
    nodes.set(id, {
      id,
      port,
      proxy: await startRecordingProxy(`http://127.0.0.1:${port}`),
      server: undefined,
    });
  }
  const [a, b, c, loading] = [...nodes.values()] as [LlamaNode, LlamaNode, LlamaNode, LlamaNode];
  const servers = await Promise.all([
    startServer(a),
    startServer(b),
    startServer(c),
    startServer(loading, fifo, false),
  ]);
  [a.server, b.server, c.server, loading.server] = servers;

  stack = await startStack({
    nodes: [],
    extraNodes: [
      spec(a, "CPU", [ANY, ONLY_A, C_THEN_A], 0),
      spec(b, "CPU", [ANY], 1),
      spec(c, "EDGE", [ANY, C_THEN_A], 2),
      spec(loading, "CPU", [LOADING], 3),
    ],
    fleet: {
      models: [
        { id: ANY, default_policy: "cpu" },
        { id: ONLY_A, default_policy: "cpu" },
        { id: C_THEN_A, default_policy: "edge-first" },
        { id: LOADING, default_policy: "cpu" },
      ],
      policies: [policy("cpu", ["CPU", "EDGE"]), policy("edge-first", ["EDGE", "CPU"])],
    },
    env: {
      POLL_INTERVAL_MS: "1000",
      ISOLATION_BASE_MS: "2000",
      ISOLATION_MAX_MS: "4000",
    },
  });
  for (const id of ["llama-a", "llama-b", "llama-c"]) {
    await waitForState(id, (s) => s.status === "Active" && !s.probe_pending, "Active");
  }
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  for (const node of nodes.values()) {
    await node.server?.kill();
    await node.proxy.close();
  }
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("llama.cpp nodes behind ZML", () => {
  it("relays a chat completion and a stream with its usage chunk byte for byte", async () => {
    const a = nodes.get("llama-a")!;
    const messages = [{ role: "user", content: "Hello, tiny llama" }];
    const plain = await postChat(stack.intakeUrl, { model: ONLY_A, messages, max_tokens: 12 });
    expect(plain.status).toBe(200);
    expect(plain.routing).toMatchObject({ node: "llama-a", attempts: 1 });
    const wrote = a.proxy.answers.filter((x) => x.request === "POST /v1/chat/completions");
    expect(plain.text).toBe(wrote.at(-1)!.body.toString("utf8"));
    expect(JSON.parse(plain.text)).toMatchObject({
      object: "chat.completion",
      usage: { completion_tokens: 12 },
    });

    const stream = await postChat(stack.intakeUrl, {
      model: ONLY_A,
      messages,
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(stream.status).toBe(200);
    expect(stream.headers["content-type"]).toMatch(/^text\/event-stream/);
    const server = a.proxy.answers.filter((x) => x.request === "POST /v1/chat/completions").at(-1)!;
    expect(stream.text).toBe(server.body.toString("utf8"));
    const events = stream.text.split("\n\n").filter((e) => e.startsWith("data: "));
    expect(events.at(-1)).toBe("data: [DONE]");
    const usage = JSON.parse(events.at(-2)!.slice("data: ".length)) as {
      choices: unknown[];
      usage: { completion_tokens: number; prompt_tokens: number };
    };
    expect(usage.choices).toEqual([]);
    expect(usage.usage.completion_tokens).toBe(6);
    expect(usage.usage.prompt_tokens).toBeGreaterThan(0);
  });

  it("returns llama.cpp's own 400 for a prompt longer than its context, without a retry", async () => {
    const before = posts().length;
    const tooLong = "x ".repeat(3_000);
    const res = await postChat(stack.intakeUrl, {
      model: ANY,
      messages: [{ role: "user", content: tooLong }],
      max_tokens: 4,
    });
    expect(res.status).toBe(400);
    expect(res.routing?.attempts).toBe(1);
    const answers = posts().slice(before);
    expect(answers).toHaveLength(1);
    expect(res.text).toBe(answers[0]!.body.toString("utf8"));
    expect(JSON.parse(res.text)).toMatchObject({
      error: { code: 400, type: "exceed_context_size_error", n_ctx: CONTEXT / SLOTS },
    });
  });

  it("reads queue depth from llama.cpp's metrics while requests wait for a slot", async () => {
    const b = nodes.get("llama-b")!;
    // Straight to the server, past the gateway: only llama.cpp's own gauges can report them.
    // One request more than the slots: two run, one waits, for seconds.
    const controller = new AbortController();
    const load = Array.from({ length: SLOTS + 1 }, () =>
      request(`http://127.0.0.1:${b.port}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "Keep going" }],
          max_tokens: 1_900,
        }),
        signal: controller.signal,
      }).then(
        (r) => r.body.text(),
        () => "aborted",
      ),
    );
    const seen: NodeState[] = [];
    try {
      const busy = await waitForState(
        "llama-b",
        (s) => {
          seen.push(s);
          return s.queue_depth > 0;
        },
        "requests running",
      );
      expect(busy.status).toBe("Active");
      const full = await waitForState(
        "llama-b",
        (s) => {
          seen.push(s);
          return s.running === SLOTS && s.waiting === 1;
        },
        "both slots busy and one request deferred",
      );
      expect(full.queue_depth).toBe(SLOTS + 1);
      // llama.cpp never runs more requests than it has slots.
      expect(seen.every((s) => s.running <= SLOTS && s.queue_depth === s.running + s.waiting)).toBe(
        true,
      );
      // The slots' contexts, from /slots.
      expect(full.kv_cache_capacity_tokens).toBe(CONTEXT);
      // What the engine says it serves, from its /v1/models (its --alias). llama-server
      // answers any model name with its one model, so nothing is withheld from it.
      expect(full.served_models).toEqual([ANY]);
      expect(full.unserved_models).toEqual([]);
    } finally {
      // llama-server cancels a request whose client went away.
      controller.abort();
      await Promise.all(load);
    }
    await waitForState("llama-b", (s) => s.queue_depth === 0, "idle again");
  });

  it("serves one conversation's later turns from the node's prompt cache", async () => {
    const messages: Array<{ role: string; content: string }> = [
      { role: "system", content: "You are a tiny test model. ".repeat(20) },
    ];
    const cached: number[] = [];
    for (const turn of ["First question?", "Second question?", "Third question?"]) {
      messages.push({ role: "user", content: turn });
      const res = await postChat(stack.intakeUrl, { model: ONLY_A, messages, max_tokens: 8 });
      expect(res.status).toBe(200);
      expect(res.routing?.node).toBe("llama-a");
      const body = JSON.parse(res.text) as {
        choices: Array<{ message: { content: string } }>;
        usage: { prompt_tokens_details?: { cached_tokens?: number } };
      };
      cached.push(body.usage.prompt_tokens_details?.cached_tokens ?? 0);
      messages.push({ role: "assistant", content: body.choices[0]!.message.content });
    }
    // Each turn reuses more of the conversation from the slot's cache.
    expect(cached[1]!).toBeGreaterThan(cached[0]!);
    expect(cached[2]!).toBeGreaterThan(cached[1]!);
    // And the aggregator read it from llamacpp:prompt_tokens_cached_total.
    const a = await waitForState(
      "llama-a",
      (s) => (s.prefix_cache_hit_rate ?? 0) > 0.5,
      "prefix-cache hit rate over the turns",
    );
    expect(a.prefix_cache_hit_rate).toBeLessThanOrEqual(1);
  });

  it("keeps a server that is still loading its model out of rotation, saying why", async () => {
    const s = await waitForState(
      "llama-loading",
      (x) => x.last_error !== null && x.consecutive_failures >= 1,
      "probe failed",
    );
    expect(s.status).not.toBe("Active");
    expect(s.health_score).toBeLessThan(100);
    expect(s.last_error).toBe(
      "health endpoint answered 503: Loading model (the engine is still loading its model)",
    );
    const res = await postChat(stack.intakeUrl, {
      model: LOADING,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(res.status).toBe(503);
    expect(nodes.get("llama-loading")!.proxy.seen.some((l) => l.startsWith("POST"))).toBe(false);
    // The operator's view: `zml get nodes` says it in the table.
    const cli = await runCommand(
      process.execPath,
      [join(repoRoot(), "libs/cli/src/main.ts"), "get", "nodes"],
      {
        env: { ...process.env, ...stack.nats.serviceEnv("admin"), ZML_NODE_ALLOW_LOOPBACK: "true" },
      },
    );
    const row = cli.stdout.split("\n").find((l) => l.startsWith("llama-loading"));
    expect(row).toContain("llamacpp");
    expect(row).toContain("health endpoint answered 503: Loading model");
  });

  it("fails over from a server killed mid-run, isolates it with its reason, readmits it after a restart", async () => {
    const c = nodes.get("llama-c")!;
    await waitForState("llama-c", (s) => s.status === "Active" && !s.probe_pending, "Active");
    const first = await postChat(stack.intakeUrl, {
      model: C_THEN_A,
      messages: [{ role: "user", content: "before" }],
      max_tokens: 4,
    });
    expect(first.routing).toMatchObject({ node: "llama-c", attempts: 1 });

    await c.server!.kill();
    // The gateway still holds llama-c Active until the next probe: the request goes there,
    // meets a dead server, and is failed over to llama-a.
    const during = await postChat(stack.intakeUrl, {
      model: C_THEN_A,
      messages: [{ role: "user", content: "during" }],
      max_tokens: 4,
    });
    expect(during.status).toBe(200);
    expect(during.routing).toMatchObject({ node: "llama-a", attempts: 2 });

    const isolated = await waitForState("llama-c", (s) => s.status === "Isolated", "Isolated");
    expect(isolated.last_error).toBe("no HTTP answer from the node");
    expect(isolated.health_score).toBeLessThan(100);
    const after = await postChat(stack.intakeUrl, {
      model: C_THEN_A,
      messages: [{ role: "user", content: "after" }],
      max_tokens: 4,
    });
    expect(after.routing).toMatchObject({ node: "llama-a", attempts: 1 });

    c.server = await startServer(c);
    const back = await waitForState(
      "llama-c",
      (s) => s.status === "Active" && !s.probe_pending,
      "Active after the restart",
    );
    expect(back.last_error).toBeNull();
  });
});
