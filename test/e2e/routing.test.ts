import { openKv } from "@zml/bus";
import { KV_BUCKETS, NodeStateSchema } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { startSimNode } from "@zml/node-sim";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, postChat } from "../support/http.ts";
import { nodeSpec, startActiveStack, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/** One model per scenario, each with its own nodes, so scenarios cannot disturb each other. */
const SCENARIOS = {
  retry500: { H100: ["r5-h100"], MI300X: ["r5-mi"] },
  family503: { H100: ["f3-h100-a", "f3-h100-b"], MI300X: ["f3-mi"] },
  client4xx: { H100: ["c4-h100"], MI300X: ["c4-mi"] },
  reset: { H100: ["rs-h100"], MI300X: ["rs-mi"] },
  hang: { H100: ["hg-h100"], MI300X: ["hg-mi"] },
  cut: { H100: ["ct-h100"], MI300X: [] },
} as const;

describe("failures are retried within the budget, client errors are not", () => {
  let stack: Stack;
  const payloads = (id: string) => stack.sims.get(id)!.stats().payloads_received;

  beforeAll(async () => {
    const scenarios: Record<string, Record<string, readonly string[]>> = SCENARIOS;
    const nodes = Object.entries(scenarios).flatMap(([model, families]) =>
      Object.entries(families).flatMap(([family, ids]) =>
        ids.map((nodeId) => ({ nodeId, family, models: [model] })),
      ),
    );
    stack = await startActiveStack({
      nodes,
      fleet: {
        models: Object.keys(SCENARIOS).map((id) => ({ id, default_policy: "h100-first" })),
        policies: [chainPolicy("h100-first", ["H100", "MI300X"])],
      },
      env: { DISPATCH_HEADERS_TIMEOUT_MS: "1500", NODE_COOLDOWN_MS: "60000" },
    });
  });
  afterAll(() => stack?.stop());

  it("retries a 500 on another node and reports two attempts", async () => {
    stack.sims.get("r5-h100")!.setFault({ kind: "status", status: 500 });
    const res = await postChat(stack.intakeUrl, chat("retry500"));
    expect(res.status).toBe(200);
    expect(res.routing).toMatchObject({ node: "r5-mi", family: "MI300X", attempts: 2 });
    expect(payloads("r5-h100")).toBe(1);
  });

  it("falls from a family answering 503 to the next family, then skips it during cooldown", async () => {
    for (const id of SCENARIOS.family503.H100)
      stack.sims.get(id)!.setFault({ kind: "status", status: 503 });
    const first = await postChat(stack.intakeUrl, chat("family503"));
    expect(first.status).toBe(200);
    expect(first.routing).toMatchObject({ node: "f3-mi", attempts: 3 });
    const second = await postChat(stack.intakeUrl, chat("family503"));
    expect(second.routing).toMatchObject({ node: "f3-mi", attempts: 1 });
    expect(payloads("f3-h100-a") + payloads("f3-h100-b")).toBe(2);
  });

  it.each([400, 402])("returns a %i as it is, with exactly one payload sent", async (status) => {
    const node = stack.sims.get("c4-h100")!;
    node.resetStats();
    node.setFault({ kind: "status", status });
    const res = await postChat(stack.intakeUrl, chat("client4xx"));
    expect(res.status).toBe(status);
    expect(res.routing).toMatchObject({ node: "c4-h100", attempts: 1 });
    expect(payloads("c4-h100")).toBe(1);
    expect(payloads("c4-mi")).toBe(0);
  });

  it("fails over from a connection reset", async () => {
    stack.sims.get("rs-h100")!.setFault({ kind: "reset" });
    const res = await postChat(stack.intakeUrl, chat("reset"));
    expect(res.status).toBe(200);
    expect(res.routing).toMatchObject({ node: "rs-mi", attempts: 2 });
  });

  it("fails over from a node that accepts and never answers, within the per-try timeout", async () => {
    stack.sims.get("hg-h100")!.setFault({ kind: "hang" });
    const startedAt = Date.now();
    const res = await postChat(stack.intakeUrl, chat("hang"));
    expect(res.status).toBe(200);
    expect(res.routing).toMatchObject({ node: "hg-mi", attempts: 2 });
    // Bounded by the 1.5 s headers timeout, far below the 120 s request timeout.
    expect(Date.now() - startedAt).toBeLessThan(20_000);
  });

  it("ends a stream cut mid-answer with an error event, never [DONE]", async () => {
    stack.sims.get("ct-h100")!.setFault({ kind: "cut_stream", afterChunks: 3 });
    const res = await postChat(stack.intakeUrl, chat("cut", { stream: true }));
    expect(res.status).toBe(200);
    expect(res.text).toContain("event: error");
    expect(res.text).toContain('"code":"stream_interrupted"');
    expect(res.text).not.toContain("[DONE]");
    expect(res.routing?.attempts).toBe(1);
  });

  it("never makes more than 3 attempts, whatever fails", async () => {
    for (const id of ["f3-mi", ...SCENARIOS.family503.H100]) {
      stack.sims.get(id)!.setFault({ kind: "status", status: 500 });
    }
    const before = ["f3-mi", "f3-h100-a", "f3-h100-b"].reduce((n, id) => n + payloads(id), 0);
    const res = await postChat(stack.intakeUrl, chat("family503"));
    expect([502, 503]).toContain(res.status);
    const after = ["f3-mi", "f3-h100-a", "f3-h100-b"].reduce((n, id) => n + payloads(id), 0);
    expect(after - before).toBeLessThanOrEqual(3);
  });
});

describe("saturation", () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startActiveStack({
      nodes: [
        {
          nodeId: "sat-a",
          family: "H100",
          models: ["fast-fail", "queued", "queued-short"],
          maxConcurrency: 1,
          ttftMs: 1_500,
        },
        {
          nodeId: "sat-b",
          family: "H100",
          models: ["fast-fail", "queued", "queued-short"],
          maxConcurrency: 1,
          ttftMs: 1_500,
        },
      ],
      fleet: {
        models: [
          { id: "fast-fail", default_policy: "fail-fast" },
          { id: "queued", default_policy: "wait" },
          { id: "queued-short", default_policy: "wait-short" },
        ],
        policies: [
          chainPolicy("fail-fast", ["H100"]),
          chainPolicy("wait", ["H100"], { queue_on_saturation: true, max_queue_ms: 20_000 }),
          chainPolicy("wait-short", ["H100"], { queue_on_saturation: true, max_queue_ms: 300 }),
        ],
      },
    });
  });
  afterAll(() => stack?.stop());

  /** Occupies both single-slot nodes with slow requests; resolves when they finish. */
  async function occupyBoth(): Promise<() => Promise<unknown>> {
    // Start from idle as the gateway sees it: the last poll must not still show a busy node.
    const kv = await openKv(stack.bus, KV_BUCKETS.nodeState);
    await pollUntil(
      async () => {
        for (const id of stack.sims.keys()) {
          const e = await kv.get(id);
          if (!e || NodeStateSchema.parse(e.json()).queue_depth !== 0) return false;
        }
        return true;
      },
      { message: "both nodes idle" },
    );
    const busy = [
      postChat(stack.intakeUrl, chat("fast-fail")),
      postChat(stack.intakeUrl, chat("fast-fail")),
    ];
    await pollUntil(() => [...stack.sims.values()].every((s) => s.stats().in_flight === 1), {
      message: "both nodes busy",
    });
    return () => Promise.all(busy);
  }

  it("answers 503 with Retry-After at once when every node is full", async () => {
    const finishBusy = await occupyBoth();
    let busyDone = false;
    const busy = finishBusy().then((r) => ((busyDone = true), r));
    const res = await postChat(stack.intakeUrl, chat("fast-fail"));
    expect(busyDone).toBe(false); // it did not wait for capacity
    expect(res.status).toBe(503);
    expect(Number(res.headers["retry-after"])).toBeGreaterThan(0);
    expect(JSON.parse(res.text).error.code).toBe("saturated");
    await busy;
  });

  it("with queue_on_saturation, completes once a node frees up", async () => {
    const finishBusy = await occupyBoth();
    let busyDone = false;
    const busy = finishBusy().then((r) => ((busyDone = true), r));
    const res = await postChat(stack.intakeUrl, chat("queued"));
    expect(res.status).toBe(200);
    expect([...stack.sims.values()].some((s) => s.stats().completed > 0)).toBe(true);
    await busy;
    expect(busyDone).toBe(true);
  });

  it("with queue_on_saturation, answers 503 when max_queue_ms passes", async () => {
    const finishBusy = await occupyBoth();
    const res = await postChat(stack.intakeUrl, chat("queued-short"));
    expect(res.status).toBe(503);
    expect(JSON.parse(res.text).error.code).toBe("saturated");
    await finishBusy();
  });
});

describe("adding a family changes routing with no change to the client call", () => {
  it("shifts traffic to a new MI300X node once the policy puts MI300X first", async () => {
    const stack = await startStack({
      nodes: [{ nodeId: "shift-h100", family: "H100", models: ["shift"] }],
      fleet: {
        models: [{ id: "shift", default_policy: "pref" }],
        policies: [chainPolicy("pref", ["H100"])],
      },
    });
    try {
      await waitForStatus(stack, "Active");
      const call = () => postChat(stack.intakeUrl, chat("shift"));
      expect((await call()).routing?.node).toBe("shift-h100");

      const mi = await startSimNode({ nodeId: "shift-mi300x", flavour: "vllm", models: ["shift"] });
      stack.sims.set(mi.nodeId, mi);
      await stack.apply({
        ...stack.fleet,
        nodes: [
          ...stack.fleet.nodes,
          nodeSpec(mi, { nodeId: mi.nodeId, family: "MI300X", models: ["shift"] }, 1),
        ],
        policies: [chainPolicy("pref", ["MI300X", "H100"])],
      });
      await waitForStatus(stack, "Active", ["shift-mi300x"]);
      await pollUntil(async () => (await call()).routing?.node === "shift-mi300x", {
        message: "traffic on the MI300X node",
      });
      for (let i = 0; i < 5; i++) expect((await call()).routing?.family).toBe("MI300X");
    } finally {
      await stack.stop();
    }
  });
});

describe("two dispatcher replicas", () => {
  it("spread concurrent requests instead of piling onto one node", async () => {
    const ids = ["pile-a", "pile-b", "pile-c", "pile-d"];
    const stack = await startStack({
      nodes: ids.map((nodeId) => ({
        nodeId,
        family: "H100",
        models: ["pile"],
        maxConcurrency: 8,
        ttftMs: 400,
      })),
      fleet: { models: [{ id: "pile" }], policies: [] },
      dispatchers: 2,
    });
    try {
      await waitForStatus(stack, "Active");
      const results = await Promise.all(
        Array.from({ length: 16 }, () => postChat(stack.intakeUrl, chat("pile"))),
      );
      expect(results.every((r) => r.status === 200)).toBe(true);
      const perNode = ids.map((id) => stack.sims.get(id)!.stats().payloads_received);
      expect(perNode.reduce((a, b) => a + b, 0)).toBe(16);
      // Piling on would put all 16 (or 8 per replica) on one node.
      expect(Math.max(...perNode)).toBeLessThanOrEqual(7);
      expect(perNode.filter((n) => n > 0).length).toBeGreaterThanOrEqual(3);
    } finally {
      await stack.stop();
    }
  });
});
