import type { NodeSpec } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { describe, expect, it } from "vitest";
import { createPollScheduler } from "../src/poll-scheduler.ts";

const spec = (id: string): NodeSpec => ({
  id,
  endpoint: "http://127.0.0.1:1",
  framework: "vllm",
  accelerator_family: "H100",
  tier: 1,
  models: ["m"],
  max_concurrency: 1,
  health_path: "/health",
  metrics_path: "/metrics",
  registered_at: 0,
});

describe("poll scheduler", () => {
  it("keeps polling healthy nodes while another node's probe hangs", async () => {
    const polls = new Map<string, number>();
    const scheduler = createPollScheduler({
      intervalMs: 10,
      jitter: 0.1,
      concurrency: 2,
      random: Math.random,
      poll: (node) => {
        polls.set(node.id, (polls.get(node.id) ?? 0) + 1);
        return node.id === "hang" ? new Promise<void>(() => {}) : Promise.resolve();
      },
    });
    scheduler.sync(
      new Map([
        ["hang", spec("hang")],
        ["fast", spec("fast")],
      ]),
    );
    await pollUntil(() => (polls.get("fast") ?? 0) >= 10, { timeoutMs: 5_000 });
    expect(polls.get("hang")).toBe(1);
    scheduler.stop();
  });

  it("starts polling added nodes and stops polling removed ones", async () => {
    const polls = new Map<string, number>();
    const scheduler = createPollScheduler({
      intervalMs: 10,
      jitter: 0,
      concurrency: 4,
      random: Math.random,
      poll: (node) => {
        polls.set(node.id, (polls.get(node.id) ?? 0) + 1);
        return Promise.resolve();
      },
    });
    scheduler.sync(new Map([["a", spec("a")]]));
    await pollUntil(() => polls.get("a"));
    scheduler.sync(new Map([["b", spec("b")]]));
    await pollUntil(() => (polls.get("b") ?? 0) >= 3);
    const aAfterRemoval = polls.get("a")!;
    await pollUntil(() => (polls.get("b") ?? 0) >= 6);
    expect(polls.get("a")).toBe(aAfterRemoval);
    scheduler.stop();
  });
});
