// Capacity-true ranking: two equal nodes under steady load share it, counted at
// the nodes (the simulator's own payload counters), through two dispatcher replicas. Ranking
// on the tokens per second a node *served* herds: the node that got the first requests looks
// fast, its idle twin slow, and the twin is never chosen.
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { chainPolicy, MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

let stack: Stack;
const TWINS = ["twin-a", "twin-b"];

beforeAll(async () => {
  stack = await startActiveStack({
    dispatchers: 2,
    // Same hardware: 200 tok/s per request, 20 tokens, 8 at a time.
    nodes: TWINS.map((nodeId) => ({
      nodeId,
      family: "H100",
      tokensPerSecond: 200,
      completionTokens: 20,
      maxConcurrency: 8,
    })),
    fleet: {
      models: [{ id: MODEL, default_policy: "h100" }],
      policies: [{ ...chainPolicy("h100", ["H100"]), latency_target_ms: 60_000 }],
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe("capacity-true ranking", () => {
  it("two equal nodes under steady load each get 40-60 % of the requests", async () => {
    const sims = TWINS.map((id) => stack.sims.get(id)!);
    for (const s of sims) s.resetStats();
    // Steady load: 4 clients in closed loops, long enough for many polls to measure both.
    const until = Date.now() + 8_000;
    let failed = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (Date.now() < until) {
          const res = await postChat(stack.intakeUrl, chat(MODEL));
          if (res.status !== 200) failed++;
        }
      }),
    );
    await pollUntil(() => sims.every((s) => s.stats().in_flight === 0), {
      timeoutMs: 10_000,
      message: "the nodes to finish",
    });
    const counts = sims.map((s) => s.stats().payloads_received);
    const total = counts[0]! + counts[1]!;
    process.stdout.write(`capacity ranking: twins served ${counts.join(" / ")} requests\n`);
    expect(failed).toBe(0);
    expect(total).toBeGreaterThan(40);
    for (const c of counts) {
      expect(c / total).toBeGreaterThanOrEqual(0.4);
      expect(c / total).toBeLessThanOrEqual(0.6);
    }
  }, 120_000);
});
