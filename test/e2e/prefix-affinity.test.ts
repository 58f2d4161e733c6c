// Prefix affinity on real processes: a tenant's requests, which share a long system prompt,
// follow the node that served its first one, through two dispatcher replicas (one replica's
// placement counts for the other), and spill to other nodes when that node is full. What each
// node received is counted at the node (the simulator's own payload counters).
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "../support/http.ts";
import { MODEL, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

let stack: Stack;
const NODES = ["pa-1", "pa-2", "pa-3"];

beforeAll(async () => {
  stack = await startActiveStack({
    dispatchers: 2,
    // Equal nodes: 10 tokens at 100 tok/s (100 ms a request), two at a time.
    nodes: NODES.map((nodeId) => ({
      nodeId,
      family: "H100",
      tokensPerSecond: 100,
      completionTokens: 10,
      maxConcurrency: 2,
      prefillTokensPerSecond: 5_000,
    })),
    fleet: {
      models: [{ id: MODEL, default_policy: "h100" }],
      policies: [
        {
          name: "h100",
          accelerator_preference: [{ family: "H100", priority: 1 }],
          latency_target_ms: 60_000,
          cost_priority: "latency",
          // Two replicas each take their share of a node's free slots until they hear from
          // each other (docs/capacity.md): a burst that finds its replica's share spent
          // waits for a slot instead of failing.
          queue_on_saturation: true,
          max_queue_ms: 10_000,
        },
        {
          name: "blind",
          accelerator_preference: [{ family: "H100", priority: 1 }],
          latency_target_ms: 60_000,
          cost_priority: "latency",
          queue_on_saturation: false,
          max_queue_ms: 0,
          prefix_affinity: false,
        },
      ],
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

/** A tenant's request: its 2,000-token system prompt, then a user turn. */
function tenantChat(tenant: string, turn: string, extra: Record<string, unknown> = {}) {
  return {
    model: MODEL,
    max_tokens: 10,
    messages: [
      { role: "system", content: `You answer for ${tenant}. `.padEnd(8_000, "Be brief. ") },
      { role: "user", content: turn },
    ],
    ...extra,
  };
}

describe("prefix affinity", () => {
  it("sends a tenant's later requests to the node that served its first, whichever replica routes them", async () => {
    const first = await postChat(stack.intakeUrl, tenantChat("acme", "first question"));
    expect(first.status).toBe(200);
    const home = first.routing!.node;
    expect(first.routing!.cachedTokens).toBe(0);
    for (const sim of stack.sims.values()) sim.resetStats();
    // Sequential: each request finds every node idle, so without affinity the registration
    // order would decide; with it, the node that holds the prompt does.
    const later = [];
    for (let i = 0; i < 8; i++) {
      later.push(await postChat(stack.intakeUrl, tenantChat("acme", `question ${i}`)));
    }
    for (const res of later) {
      expect(res.status).toBe(200);
      expect(res.routing).toMatchObject({ node: home });
      // 31 whole blocks of 256 characters: 1,984 tokens expected in the node's cache.
      expect(res.routing!.cachedTokens).toBe(1984);
    }
    expect(stack.sims.get(home)!.stats().payloads_received).toBe(8);
    // Both replicas routed some of them: the dispatchers' own logs name the decisions.
    const perReplica = await decisionsPerReplica();
    expect(perReplica.filter((n) => n > 0).length).toBe(2);
  }, 60_000);

  it("moves a tenant's requests to other nodes while its node is full", async () => {
    const seed = await postChat(stack.intakeUrl, tenantChat("globex", "seed"));
    const home = seed.routing!.node;
    for (const sim of stack.sims.values()) sim.resetStats();
    // Four at once against a node that takes two: the rest cannot wait there.
    const burst = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        postChat(stack.intakeUrl, tenantChat("globex", `burst ${i}`)),
      ),
    );
    expect(burst.map((r) => r.status)).toEqual(Array(4).fill(200));
    const nodes = burst.map((r) => r.routing!.node);
    expect(nodes.filter((n) => n === home).length).toBeGreaterThanOrEqual(1);
    expect(nodes.filter((n) => n === home).length).toBeLessThanOrEqual(2 + 1);
    expect(new Set(nodes).size).toBeGreaterThan(1);
    const received = NODES.map((id) => stack.sims.get(id)!.stats().payloads_received);
    expect(received.reduce((a, b) => a + b, 0)).toBe(4);
  }, 60_000);

  it("ignores the prefix under a policy with prefix_affinity: false", async () => {
    const first = await postChat(
      stack.intakeUrl,
      tenantChat("initech", "first", { policy: "blind" }),
    );
    expect(first.routing!.cachedTokens).toBeUndefined();
    const nodes = new Set<string>();
    // Concurrent pairs: without affinity the second of a pair goes to an idle node.
    for (let i = 0; i < 3; i++) {
      const pair = await Promise.all([
        postChat(stack.intakeUrl, tenantChat("initech", `a${i}`, { policy: "blind" })),
        postChat(stack.intakeUrl, tenantChat("initech", `b${i}`, { policy: "blind" })),
      ]);
      for (const res of pair) nodes.add(res.routing!.node);
    }
    expect(nodes.size).toBeGreaterThan(1);
  }, 60_000);
});

/** Routed requests per dispatcher replica, from each replica's own `/metrics`. */
async function decisionsPerReplica(): Promise<number[]> {
  const counts: number[] = [];
  for (const [name, proc] of stack.services) {
    if (!name.startsWith("dispatcher")) continue;
    const ops = /"ops":"(http:\/\/[^"]+)"/.exec(proc.output())![1]!;
    const text = await (await request(`${ops}/metrics`)).body.text();
    const match = /zml_dispatcher_decisions_total\{[^}]*outcome="routed"[^}]*\} (\d+)/.exec(text);
    counts.push(match ? Number(match[1]) : 0);
  }
  return counts;
}
