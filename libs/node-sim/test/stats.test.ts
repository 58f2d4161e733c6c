import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { startSimNode } from "../src/index.ts";
import type { SimRuntimeConfig, SimStats } from "../src/index.ts";
import { CHAT_BODY, metricValue, post, readJson } from "./helpers.ts";
import type { ChatCompletion, ErrorEnvelope } from "./helpers.ts";

const getStats = async (url: string): Promise<SimStats> =>
  readJson<SimStats>(await fetch(`${url}/_sim/stats`));

describe("stats and run-time config", () => {
  it("counts every payload received, whatever answer it got", async () => {
    await using node = await startSimNode({ nodeId: "s", flavour: "vllm", models: ["llama-3-8b"] });
    const initial = await getStats(node.url);
    expect(initial).toEqual({
      node_id: "s",
      instance_id: node.instanceId,
      payloads_received: 0,
      in_flight: 0,
      running: 0,
      waiting: 0,
      completed: 0,
      last_request: null,
      payloads_by_http_version: {},
    });

    await (await post(`${node.url}/v1/chat/completions`, CHAT_BODY)).text();
    await (await post(`${node.url}/v1/chat/completions`, "{bad")).text();
    await (await post(`${node.url}/v1/chat/completions`, { ...CHAT_BODY, model: "x" })).text();
    node.setFault({ kind: "status", status: 503, times: 1 });
    await (await post(`${node.url}/v1/chat/completions`, CHAT_BODY)).text();
    node.setFault({ kind: "reset", times: 1 });
    await post(`${node.url}/v1/chat/completions`, CHAT_BODY).catch(() => undefined);
    // Not inference payloads:
    await fetch(`${node.url}/health`);
    await fetch(`${node.url}/metrics`);
    await fetch(`${node.url}/v1/chat/completions`);

    const raw = JSON.stringify({ model: "llama-3-8b", prompt: "secret prompt" });
    await (
      await fetch(`${node.url}/v1/completions?x=1`, {
        method: "POST",
        headers: {
          authorization: "Bearer sk-must-not-leak",
          "x-trace": "abc",
          "content-type": "application/json",
        },
        body: raw,
      })
    ).text();

    const stats = await getStats(node.url);
    expect(stats).toMatchObject({ payloads_received: 6, completed: 2, in_flight: 0 });
    expect(stats.last_request?.path).toBe("/v1/completions");
    expect(stats.last_request?.body_sha256).toBe(createHash("sha256").update(raw).digest("hex"));
    expect(stats.last_request?.headers["x-trace"]).toBe("abc");
    expect(stats.last_request?.headers).not.toHaveProperty("authorization");
    expect(JSON.stringify(stats)).not.toContain("sk-must-not-leak");
    expect(node.stats()).toEqual(stats);

    const reset = await fetch(`${node.url}/_sim/reset-stats`, { method: "POST" });
    expect(await readJson<SimStats>(reset)).toMatchObject({
      payloads_received: 0,
      completed: 0,
      last_request: null,
    });
  });

  it("changes pacing and length at run time", async () => {
    await using node = await startSimNode({ nodeId: "s", flavour: "vllm", models: ["llama-3-8b"] });
    const put = await fetch(`${node.url}/_sim/config`, {
      method: "PUT",
      body: JSON.stringify({ completionTokens: 3, tokensPerSecond: 2000, ttftMs: 1 }),
    });
    expect(put.status).toBe(200);
    expect((await readJson<{ config: SimRuntimeConfig }>(put)).config).toEqual({
      completionTokens: 3,
      tokensPerSecond: 2000,
      ttftMs: 1,
      maxConcurrency: 8,
    });
    const body = await readJson<ChatCompletion>(
      await post(`${node.url}/v1/chat/completions`, CHAT_BODY),
    );
    expect(body.usage.completion_tokens).toBe(3);

    for (const bad of [{ maxConcurrency: 0 }, { ttftMs: -1 }, { speed: 1 }, "x"]) {
      const res = await fetch(`${node.url}/_sim/config`, {
        method: "PUT",
        body: JSON.stringify(bad),
      });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect((await readJson<ErrorEnvelope>(res)).error.code).toBe("invalid_config");
    }
    expect(() => node.configure({ completionTokens: 0 })).toThrow(/completionTokens/);
  });

  it("tells a restarted node at the same port apart by its instance id", async () => {
    const first = await startSimNode({ nodeId: "r", flavour: "tgi", models: ["m"] });
    const port = first.port;
    const before = await (await fetch(`${first.url}/metrics`)).text();
    await first.close();
    await using second = await startSimNode({ nodeId: "r", flavour: "tgi", models: ["m"], port });
    expect(second.url).toBe(first.url);
    const after = await (await fetch(`${second.url}/metrics`)).text();
    expect(metricValue(before, `zml_sim_instance_info{instance_id="${first.instanceId}"}`)).toBe(1);
    expect(metricValue(after, `zml_sim_instance_info{instance_id="${second.instanceId}"}`)).toBe(1);
    expect(second.instanceId).not.toBe(first.instanceId);
  });
});
