import { spawn } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:http2";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import type { SimStats } from "../src/index.ts";
import { parsePrometheusText } from "@zml/health";
import { metricValue, readJson, waitFor } from "./helpers.ts";

interface Ready {
  event: string;
  node_id: string;
  url: string;
}

const CLI = fileURLToPath(new URL("../src/cli.ts", import.meta.url));

function run(args: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  return { child, exited, stderr: () => stderr };
}

describe("cli", () => {
  it("prints one ready line, serves, and exits cleanly on SIGTERM", async () => {
    const { child, exited } = run([
      "--id",
      "h100-a",
      "--flavour",
      "tgi",
      "--model",
      "llama-3-8b",
      "--model",
      "other",
      "--port",
      "0",
      "--ttft-ms",
      "0",
      "--tps",
      "0",
      "--max-concurrency",
      "4",
    ]);
    try {
      const lines = createInterface({ input: child.stdout });
      const [first] = (await once(lines, "line")) as [string];
      const ready = JSON.parse(first) as Ready;
      expect(ready).toMatchObject({ event: "ready", node_id: "h100-a" });
      expect(ready.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

      const res = await fetch(`${ready.url}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "other", messages: [{ role: "user", content: "hi" }] }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-sim-node")).toBe("h100-a");
      expect(await (await fetch(`${ready.url}/metrics`)).text()).toContain("tgi_queue_size");
      const stats = await readJson<SimStats>(await fetch(`${ready.url}/_sim/stats`));
      expect(stats.payloads_received).toBe(1);

      child.kill("SIGTERM");
      const [code, signal] = await exited;
      expect(signal).toBeNull();
      expect(code).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("runs the engine model with the settings of its flags", async () => {
    const { child, exited } = run(
      ["--id", "e", "--model", "m", "--max-concurrency", "3"].concat([
        "--kv-cache-blocks",
        "128",
        "--prefill-tps",
        "40000",
        "--step-base-ms",
        "1",
      ]),
    );
    try {
      const lines = createInterface({ input: child.stdout });
      const [first] = (await once(lines, "line")) as [string];
      const { url } = JSON.parse(first) as Ready;
      const res = await fetch(`${url}/v1/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "m", prompt: "p".repeat(200) }),
      });
      expect(res.status).toBe(200);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const [cacheConfig] = parsePrometheusText(metrics).series.get("vllm:cache_config_info") ?? [];
      expect(cacheConfig).toMatchObject({ labels: { num_gpu_blocks: "128" }, value: 1 });
      expect(
        metricValue(metrics, 'vllm:prefix_cache_queries_total{model_name="m",engine="0"}'),
      ).toBe(50);
      const stats = await readJson<SimStats>(await fetch(`${url}/_sim/stats`));
      expect(stats.engine).toMatchObject({ kv_cache_blocks: 128, cached_blocks: 3 });
      child.kill("SIGTERM");
      expect((await exited)[0]).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("closes on SIGTERM even with a hanging request", async () => {
    const { child, exited } = run(["--id", "n", "--model", "m"]);
    try {
      const lines = createInterface({ input: child.stdout });
      const [first] = (await once(lines, "line")) as [string];
      const { url } = JSON.parse(first) as Ready;
      await fetch(`${url}/_sim/fault`, { method: "PUT", body: '{"kind":"hang"}' });
      const pending = fetch(`${url}/v1/completions`, {
        method: "POST",
        body: '{"model":"m","prompt":"x"}',
      }).catch(() => "closed");
      await waitFor(
        async () => (await readJson<SimStats>(await fetch(`${url}/_sim/stats`))).in_flight,
        (n) => n === 1,
        "the hanging request",
      );
      child.kill("SIGTERM");
      expect((await exited)[0]).toBe(0);
      expect(await pending).toBe("closed");
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("serves h2c with --protocol h2c", async () => {
    const { child, exited } = run(["--id", "h", "--model", "m", "--protocol", "h2c"]);
    try {
      const lines = createInterface({ input: child.stdout });
      const [first] = (await once(lines, "line")) as [string];
      const { url } = JSON.parse(first) as Ready;
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const session = connect(url);
      const status = await new Promise<unknown>((resolve, reject) => {
        const stream = session.request({ ":path": "/health" });
        stream.on("response", (headers) => resolve(headers[":status"]));
        stream.on("error", reject);
        stream.end();
      });
      session.close();
      expect(status).toBe(200);
      child.kill("SIGTERM");
      expect((await exited)[0]).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });

  for (const [label, args, pattern] of [
    ["missing --id", ["--model", "m"], /--id is required/],
    ["missing --model", ["--id", "n"], /--model/],
    ["bad flavour", ["--id", "n", "--model", "m", "--flavour", "sglang"], /--flavour/],
    ["bad number", ["--id", "n", "--model", "m", "--tps", "fast"], /--tps/],
    ["out of range", ["--id", "n", "--model", "m", "--max-concurrency", "0"], /maxConcurrency/],
    ["unknown option", ["--id", "n", "--model", "m", "--bogus"], /bogus/],
    ["bad protocol", ["--id", "n", "--model", "m", "--protocol", "h3"], /--protocol/],
    ["key without cert", ["--id", "n", "--model", "m", "--tls-key-file", "k"], /go together/],
    [
      "unreadable key",
      ["--id", "n", "--model", "m", "--tls-key-file", "/nonexistent", "--tls-cert-file", "/x"],
      /cannot read \/nonexistent/,
    ],
  ] as const) {
    it(`exits with code 2 on ${label}`, async () => {
      const { exited, stderr, child } = run([...args]);
      const lines: string[] = [];
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => lines.push(chunk));
      const [code] = await exited;
      expect(code).toBe(2);
      expect(stderr()).toMatch(pattern);
      expect(lines.join("")).toBe("");
    });
  }
});
