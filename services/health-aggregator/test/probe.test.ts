// probeNode against real sockets: what a probe says of a node that does not speak HTTP, and
// of one that answers more than a probe reads.
import { createServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import type { AddressInfo, Server } from "node:net";
import { findFreePort } from "@zml/harness";
import { Agent } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import { createNodeAddressPolicy } from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import type { HostResolver } from "@zml/runtime";
import { startSimNode } from "@zml/node-sim";
import { createNodeProber, probeNode } from "../src/probe.ts";

const agent = new Agent();
const servers: Server[] = [];
afterAll(async () => {
  await agent.close();
  for (const s of servers) s.close();
});

async function listen(server: Server): Promise<string> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const spec = (endpoint: string): NodeSpec => nodeSpec("n", { endpoint, max_concurrency: 4 });

const limits = { timeoutMs: 500, maxBodyBytes: 64 * 1024 };

describe("probeNode", () => {
  it("says the same of a closed port, a silent one and one that does not speak HTTP", async () => {
    const closed = `http://127.0.0.1:${await findFreePort()}`;
    const silent = await listen(createTcpServer(() => undefined));
    const notHttp = await listen(createTcpServer((s) => s.end("SSH-2.0-OpenSSH_9.2\r\n")));
    const errors = await Promise.all(
      [closed, silent, notHttp].map(async (e) => {
        const r = await probeNode(agent, spec(e), limits);
        return r.ok ? "ok" : r.error;
      }),
    );
    expect(errors).toEqual([
      "no HTTP answer from the node",
      "no HTTP answer from the node",
      "no HTTP answer from the node",
    ]);
  });

  it("fails a node whose metrics are larger than the probe reads, without reading them all", async () => {
    let metricsSent = 0;
    const url = await listen(
      createServer((req, res) => {
        if (req.url === "/health") return void res.end();
        const line = Buffer.from(`vllm:num_requests_running{pad="${"x".repeat(1000)}"} 0\n`);
        const more = () => {
          while (metricsSent < 10_000 && res.write(line)) metricsSent++;
          if (metricsSent < 10_000) res.once("drain", more);
          else res.end();
        };
        more();
      }),
    );
    const result = await probeNode(agent, spec(url), limits);
    expect(result).toEqual({ ok: false, error: "metrics answer is larger than 65536 bytes" });
    expect(metricsSent).toBeLessThan(10_000);
  });
});

describe("probeNode: llama.cpp nodes and probe failures that say why", () => {
  const llamacpp = (endpoint: string, framework: NodeSpec["framework"] = "llamacpp") =>
    nodeSpec("cpu-a", { endpoint, framework, max_concurrency: 2 });

  it("reads a llama.cpp node's metrics and its slots' contexts", async () => {
    await using sim = await startSimNode({
      nodeId: "cpu-a",
      flavour: "llamacpp",
      models: ["m"],
      maxConcurrency: 3,
    });
    const result = await probeNode(agent, llamacpp(sim.url), limits);
    expect(result).toMatchObject({
      ok: true,
      reading: { running: 0, waiting: 0, slots: 3, kvCacheCapacityTokens: 3 * 4096 },
    });
  });

  it("says a llama.cpp server is still loading its model", async () => {
    await using sim = await startSimNode({ nodeId: "cpu-a", flavour: "llamacpp", models: ["m"] });
    sim.setFault({ kind: "health_fail" });
    expect(await probeNode(agent, llamacpp(sim.url), limits)).toEqual({
      ok: false,
      error: "health endpoint answered 503: Loading model (the engine is still loading its model)",
    });
  });

  it("names the framework that fits when a node is declared as another", async () => {
    await using sim = await startSimNode({ nodeId: "cpu-a", flavour: "llamacpp", models: ["m"] });
    const result = await probeNode(agent, llamacpp(sim.url, "vllm"), limits);
    expect(result).toEqual({
      ok: false,
      error:
        "unreadable vllm metrics: missing series vllm:num_requests_running; missing series " +
        "vllm:num_requests_waiting; these are llama.cpp metrics: register the node with framework: llamacpp",
    });
  });

  it("says to start llama-server with --metrics when its metrics endpoint is off", async () => {
    // What llama-server answers on /metrics without --metrics (server-context.cpp).
    const url = await listen(
      createServer((req, res) => {
        if (req.url === "/health") return void res.end('{"status":"ok"}');
        res.writeHead(501, { "content-type": "application/json; charset=utf-8" });
        res.end(
          '{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with `--metrics`","type":"not_supported_error"}}',
        );
      }),
    );
    expect(await probeNode(agent, llamacpp(url), limits)).toEqual({
      ok: false,
      error:
        "metrics endpoint answered 501: This server does not support metrics endpoint. Start it with `--metrics` (start llama-server with --metrics)",
    });
  });
});

describe("probeNode: SGLang nodes", () => {
  it("reads its documented metrics, and says to enable them when they are off", async () => {
    let metricsOn = true;
    const url = await listen(
      createServer((req, res) => {
        if (req.url === "/health") return void res.end();
        if (req.url === "/metrics" && metricsOn) {
          return void res.end(
            'sglang:num_running_reqs{model_name="m"} 3.0\nsglang:num_queue_reqs{model_name="m"} 1.0\n' +
              'sglang:cache_hit_rate{model_name="m"} 0.25\n',
          );
        }
        res.writeHead(404, { "content-type": "application/json" }).end('{"detail":"Not Found"}');
      }),
    );
    const sglang = nodeSpec("sg-a", { endpoint: url, framework: "sglang" });
    expect(await probeNode(agent, sglang, limits)).toMatchObject({
      ok: true,
      reading: { running: 3, waiting: 1, prefixCache: { kind: "rate", hitRate: 0.25 } },
    });
    metricsOn = false;
    expect(await probeNode(agent, sglang, limits)).toEqual({
      ok: false,
      error: "metrics endpoint answered 404: Not Found (start SGLang with --enable-metrics)",
    });
  });
});

describe("probeNode: the models an engine serves", () => {
  it("reads vLLM's /v1/models, llama.cpp's aliases and TGI's /info, and fails nothing without them", async () => {
    const server = (routes: Record<string, string>, metrics: string) =>
      listen(
        createServer((req, res) => {
          if (req.url === "/health") return void res.end();
          if (req.url === "/metrics") return void res.end(metrics);
          const body = routes[req.url ?? ""];
          if (body === undefined) return void res.writeHead(404).end('{"detail":"Not Found"}');
          res.end(body);
        }),
      );
    const vllmMetrics = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n";
    const vllm = await server(
      {
        "/v1/models":
          '{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null}]}',
      },
      vllmMetrics,
    );
    const served = (r: Awaited<ReturnType<typeof probeNode>>) =>
      r.ok ? r.reading.servedModels : r.error;
    expect(served(await probeNode(agent, spec(vllm), limits))).toEqual([
      "meta-llama/Llama-3.1-8B-Instruct",
    ]);
    await using llama = await startSimNode({ nodeId: "l", flavour: "llamacpp", models: ["tiny"] });
    expect(
      served(
        await probeNode(
          agent,
          nodeSpec("l", { endpoint: llama.url, framework: "llamacpp" }),
          limits,
        ),
      ),
    ).toEqual(["tiny"]);
    const tgi = await server(
      { "/info": '{"model_id":"mistralai/Mistral-7B-Instruct-v0.3","max_total_tokens":4096}' },
      "",
    );
    expect(
      served(await probeNode(agent, nodeSpec("t", { endpoint: tgi, framework: "tgi" }), limits)),
    ).toEqual(["mistralai/Mistral-7B-Instruct-v0.3"]);
    const silent = await server({}, vllmMetrics);
    expect(await probeNode(agent, spec(silent), limits)).toMatchObject({
      ok: true,
      reading: { servedModels: null },
    });
    // One that never answers its model list is still judged on its health and metrics.
    const hanging = await listen(
      createServer((req, res) => {
        if (req.url === "/health") return void res.end();
        if (req.url === "/metrics") return void res.end(vllmMetrics);
      }),
    );
    expect(await probeNode(agent, spec(hanging), limits)).toMatchObject({
      ok: true,
      reading: { queueDepth: 0, servedModels: null },
    });
  });
});

describe("createNodeProber", () => {
  // `node.example.test` resolves to 127.0.0.1, where a healthy vLLM-like server answers.
  const resolveHost: HostResolver = (hostname) =>
    hostname === "node.example.test"
      ? Promise.resolve([{ address: "127.0.0.1", family: 4 }])
      : Promise.reject(Object.assign(new Error("ENOTFOUND"), { code: "ENOTFOUND" }));

  it("refuses a node whose name resolves to loopback, saying why, unless loopback is allowed", async () => {
    let polls = 0;
    const url = await listen(
      createServer((req, res) => {
        polls++;
        res.end(
          req.url === "/metrics"
            ? "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            : "",
        );
      }),
    );
    const node = spec(url.replace("127.0.0.1", "node.example.test"));
    const prober = (allowLoopback: boolean) =>
      createNodeProber({
        keepAliveMs: 1000,
        timeoutMs: 1000,
        maxBodyBytes: 64 * 1024,
        nodeAddresses: createNodeAddressPolicy({ allow: [], deny: [], allowLoopback }),
        resolveHost,
      });
    const refusing = prober(false);
    const allowing = prober(true);
    try {
      const refused = await refusing.probe(node);
      expect(refused).toEqual({
        ok: false,
        error: expect.stringMatching(/^node address refused: 127\.0\.0\.1 is a loopback address/),
      });
      expect(polls).toBe(0);
      expect(await allowing.probe(node)).toMatchObject({ ok: true, reading: { queueDepth: 0 } });
      // Health, metrics, and the models the engine serves.
      expect(polls).toBe(3);
    } finally {
      await refusing.close();
      await allowing.close();
    }
  });
});
