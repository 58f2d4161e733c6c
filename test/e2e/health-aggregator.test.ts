// The health aggregator against simulated nodes: a failing health check, a rising 5xx rate,
// a restarted node, a hanging node, live fleet changes, and two replicas sharing the nodes.
import { createServer } from "node:net";
import type { Server, Socket } from "node:net";
import { join } from "node:path";
import { natsConnectionOf, openKv } from "@zml/bus";
import {
  KV_BUCKETS,
  NodeStateSchema,
  ROUTING_HTTP_HEADER,
  nodeStateSubject,
  parseRoutingHeader,
} from "@zml/contracts";
import type { NodeSpec, NodeState } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { applyFleet } from "@zml/fleet";
import { pollUntil, repoRoot, startProcess } from "@zml/harness";
import { parsePrometheusText } from "@zml/health";
import type { ManagedProcess } from "@zml/harness";
import { startSimNode } from "@zml/node-sim";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  MODEL,
  authHeaders,
  chatBody,
  nodeSpec,
  startActiveStack,
  startStack,
  waitForStatus,
} from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

/** The last state published in the KV snapshot, or undefined. */
async function nodeState(stack: Stack, nodeId: string): Promise<NodeState | undefined> {
  const kv = await openKv(stack.bus, KV_BUCKETS.nodeState);
  const e = await kv.get(nodeId);
  return e?.operation === "PUT" ? NodeStateSchema.parse(e.json()) : undefined;
}

/** Every `node.state` message for a node, as `Status` or `Status+probe_pending`. */
function recordStates(stack: Stack, nodeId: string) {
  const seen: NodeState[] = [];
  const sub = natsConnectionOf(stack.bus).subscribe(nodeStateSubject(nodeId), {
    callback: (_err, msg) => {
      seen.push(NodeStateSchema.parse(msg.json()));
    },
  });
  const statuses = () => {
    const labels = seen.map((s) => (s.probe_pending ? `${s.status}+probe_pending` : s.status));
    return labels.filter((label, i) => label !== labels[i - 1]);
  };
  return { seen, statuses, stop: () => sub.unsubscribe() };
}

async function chat(stack: Stack, model = MODEL) {
  const res = await request(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: chatBody({ model }),
  });
  await res.body.text();
  const header = res.headers[ROUTING_HTTP_HEADER];
  return {
    status: res.statusCode,
    node: header === undefined ? undefined : parseRoutingHeader(String(header)).node,
  };
}

/** The aggregator's "node state changed" log lines for a node. */
function transitions(proc: ManagedProcess, nodeId: string) {
  return proc
    .output()
    .split("\n")
    .filter((line) => line.includes('"msg":"node state changed"'))
    .map((line) => JSON.parse(line) as { node: string; from: string; to: string; reason: string })
    .filter((t) => t.node === nodeId);
}

describe("one health aggregator", () => {
  let stack: Stack;
  // Only mi300x-a serves this model, so a request for it reaches mi300x-a or nothing.
  const SOLO = "solo-model";

  beforeAll(async () => {
    stack = await startActiveStack({
      // A latency policy takes the first family in its chain that has a usable node: every
      // request for MODEL tries h100-a first, then falls back to mi300x-a.
      nodes: [
        { nodeId: "h100-a", family: "H100" },
        { nodeId: "mi300x-a", family: "MI300X", models: [MODEL, SOLO] },
        { nodeId: "a100-a", family: "A100" },
      ],
      fleet: {
        models: [
          { id: MODEL, default_policy: "chain" },
          { id: SOLO, default_policy: "chain" },
        ],
        policies: [chainPolicy("chain", ["H100", "MI300X", "A100"])],
      },
      env: {
        POLL_INTERVAL_MS: "300",
        // Long enough that a hanging node's probe is still open while the others are polled.
        PROBE_TIMEOUT_MS: "20000",
        // Every poll re-publishes, so each poll of a node is visible in its checked_at.
        HEARTBEAT_MS: "250",
        ISOLATION_BASE_MS: "3000",
        // A node demoted for its error rate is readmitted once the failures age out of this.
        ERROR_WINDOW_MS: "5000",
        // Each failed dispatch would otherwise keep the node out of rotation for 30 s.
        NODE_COOLDOWN_MS: "0",
      },
    });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it("isolates a node whose /health fails, routes around it, and readmits it after a probe", async () => {
    const id = "mi300x-a";
    const sim = stack.sims.get(id)!;
    // The dispatcher's view follows the published state; wait until it routes there.
    await pollUntil(async () => (await chat(stack, SOLO)).node === id, {
      message: `a request routed to ${id}`,
    });
    const states = recordStates(stack, id);
    sim.setFault({ kind: "health_fail" });
    await waitForStatus(stack, "Isolated", [id]);
    // Heartbeats repeat Active until the fault; then one poll demotes, three isolate.
    await pollUntil(() => /^(Active,)?Degraded,Isolated$/.test(states.statuses().join()), {
      message: `Degraded then Isolated, saw ${states.statuses().join()}`,
    });

    const before = sim.stats().payloads_received;
    for (let i = 0; i < 5; i++) {
      expect((await chat(stack, SOLO)).status).toBe(503);
      expect((await chat(stack)).status).toBe(200);
    }
    expect(sim.stats().payloads_received).toBe(before);

    sim.setFault(null);
    await waitForStatus(stack, "Active", [id]);
    await pollUntil(() => states.statuses().at(-1) === "Active");
    states.stop();
    // Leaving isolation goes through probe_pending; only the probe that follows readmits it.
    const path = await pollUntil(
      () => {
        const steps = transitions(stack.services.get("health-aggregator")!, id).map(
          (t) => `${t.from}>${t.to}`,
        );
        return steps.at(-1) === "Degraded+probe_pending>Active" ? steps : undefined;
      },
      { message: `${id} readmitted in the aggregator's log` },
    );
    expect(path).toEqual(
      expect.arrayContaining([
        "Active>Degraded",
        "Degraded>Isolated",
        "Isolated>Degraded+probe_pending",
      ]),
    );
    // Back in the traffic (the dispatcher's view follows the KV snapshot).
    await pollUntil(async () => (await chat(stack, SOLO)).node === id, {
      message: `a request routed to ${id} again`,
    });
  });

  it("demotes a node whose dispatches fail with 5xx while its /health still says OK", async () => {
    const id = "h100-a";
    const sim = stack.sims.get(id)!;
    sim.setFault({ kind: "status", status: 500 });
    const answers: Array<string | undefined> = [];
    await pollUntil(
      async () => {
        const res = await chat(stack);
        answers.push(res.status === 200 ? res.node : String(res.status));
        return (await nodeState(stack, id))?.status !== "Active";
      },
      { timeoutMs: 40_000, intervalMs: 1, message: `${id} demoted` },
    );
    // Clients kept getting answers: the dispatcher retried elsewhere and reported each failure.
    expect(answers.every((a) => a === "mi300x-a")).toBe(true);
    expect(sim.stats().payloads_received).toBeGreaterThanOrEqual(10);
    const health = await request(`${sim.url}/health`);
    await health.body.text();
    expect(health.statusCode).toBe(200);
    const demotion = await pollUntil(() =>
      transitions(stack.services.get("health-aggregator")!, id).find((t) => t.from === "Active"),
    );
    expect(demotion.reason).toMatch(/error rate \d+% over \d+ dispatches/);

    // Out of the traffic while demoted, with no failed attempt spent on it.
    const before = sim.stats().payloads_received;
    const res = await chat(stack);
    expect(res.node).toBe("mi300x-a");
    if ((await nodeState(stack, id))?.status !== "Active") {
      expect(sim.stats().payloads_received).toBe(before);
    }
    sim.setFault(null);
    await waitForStatus(stack, "Active", [id]);
  });

  it("starts afresh when a node comes back at the same endpoint as a new instance", async () => {
    const id = "mi300x-a";
    const old = stack.sims.get(id)!;
    // Give the node a history worth losing: observed latency from routed requests.
    await pollUntil(
      async () => {
        await chat(stack, SOLO);
        return (await nodeState(stack, id))?.latency_ewma_ms != null;
      },
      { timeoutMs: 20_000, intervalMs: 1, message: `${id} has a latency history` },
    );
    expect((await nodeState(stack, id))?.instance_id).toBe(old.instanceId);

    await old.close();
    const restarted = await startSimNode({
      nodeId: id,
      flavour: "vllm",
      models: [MODEL, SOLO],
      port: old.port,
    });
    stack.sims.set(id, restarted);
    expect(restarted.instanceId).not.toBe(old.instanceId);
    const fresh = await pollUntil(
      async () => {
        const s = await nodeState(stack, id);
        return s?.instance_id === restarted.instanceId && s.status === "Active" ? s : undefined;
      },
      { timeoutMs: 15_000, message: `${id} seen as a new instance` },
    );
    expect(fresh.latency_ewma_ms).toBeNull();
  });

  it("keeps polling every other node while one node's probe hangs", async () => {
    const sockets: Socket[] = [];
    let requests = 0;
    const hanging: Server = createServer((socket) => {
      sockets.push(socket);
      socket.on("data", () => requests++); // read the request, never answer
    });
    await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve));
    const port = (hanging.address() as { port: number }).port;
    const hang: NodeSpec = {
      ...nodeSpec(stack.sims.get("h100-a")!, { nodeId: "hang-a", family: "H100" }, 9),
      id: "hang-a",
      endpoint: `http://127.0.0.1:${port}`,
    };
    try {
      // Registered live: the aggregator picks the node up without a restart.
      await stack.apply({ ...stack.fleet, nodes: [...stack.fleet.nodes, hang] });
      await pollUntil(() => requests > 0, { timeoutMs: 15_000, message: "hang-a probed" });
      const since = Date.now();
      const polls = new Map<string, Set<number>>();
      const others = [...stack.sims.keys()];
      await pollUntil(
        async () => {
          for (const id of others) {
            const checked = (await nodeState(stack, id))?.checked_at ?? 0;
            if (checked > since) polls.set(id, (polls.get(id) ?? new Set()).add(checked));
          }
          return others.every((id) => (polls.get(id)?.size ?? 0) >= 3);
        },
        { timeoutMs: 15_000, message: "three polls of every other node" },
      );
      // The one hanging probe was open the whole time: the others did not wait for it.
      expect(requests).toBeGreaterThan(0);
      expect(sockets).toHaveLength(1);
      expect(sockets[0]!.destroyed).toBe(false);
      expect(await nodeState(stack, "hang-a")).toBeUndefined();
    } finally {
      await applyFleet(stack.bus, stack.fleet, { prune: true });
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => hanging.close(resolve));
    }
  });

  it("picks up nodes added to and removed from the registry while it runs", async () => {
    const sim = await startSimNode({ nodeId: "late-a", flavour: "vllm", models: [MODEL] });
    try {
      const late = nodeSpec(sim, { nodeId: "late-a", family: "H100" }, 10);
      await stack.apply({ ...stack.fleet, nodes: [...stack.fleet.nodes, late] });
      await pollUntil(async () => (await nodeState(stack, "late-a"))?.status === "Active", {
        timeoutMs: 15_000,
        message: "late-a Active",
      });
      await applyFleet(stack.bus, stack.fleet, { prune: true });
      await pollUntil(async () => (await nodeState(stack, "late-a")) === undefined, {
        timeoutMs: 15_000,
        message: "late-a state removed",
      });
    } finally {
      await sim.close();
    }
  });
});

describe("two health aggregators", () => {
  let stack: Stack;
  let second: ManagedProcess | undefined;
  // Fixed ids make the split of these nodes between the replicas deterministic.
  const nodeIds = ["n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8"];
  const env = {
    POLL_INTERVAL_MS: "300",
    PROBE_TIMEOUT_MS: "1000",
    ZML_NODE_ALLOW_LOOPBACK: "true",
    HEARTBEAT_MS: "250",
    REPLICA_TTL_MS: "1500",
    LOG_LEVEL: "info",
  };

  beforeAll(async () => {
    stack = await startStack({
      nodes: nodeIds.map((nodeId) => ({ nodeId, family: "H100" })),
      env: { ...env, AGGREGATOR_REPLICA_ID: "agg-1" },
    });
    second = await startProcess({
      name: "health-aggregator-2",
      command: process.execPath,
      args: [join(repoRoot(), "services/health-aggregator/src/main.ts")],
      env: {
        ...env,
        ...stack.nats.serviceEnv("health-aggregator"),
        AGGREGATOR_OPS_PORT: "0",
        AGGREGATOR_REPLICA_ID: "agg-2",
      },
      readyLine: /"msg":"health-aggregator ready"/,
      readyTimeoutMs: 30_000,
    });
  });

  afterAll(async () => {
    await second?.stop("SIGTERM", 3_000);
    await stack?.stop();
  });

  /** Nodes a replica reports metrics for, which it does only for the nodes it polls. */
  async function ownedBy(proc: ManagedProcess): Promise<Set<string>> {
    const [, url] = await proc.waitForOutput(/"ops":"([^"]+)"/);
    const res = await request(`${url}/metrics`);
    const { series } = parsePrometheusText(await res.body.text());
    return new Set(
      (series.get("zml_node_health_score") ?? []).flatMap((sample) => sample.labels["node"] ?? []),
    );
  }

  it("split the nodes without overlap, and the survivor takes over when one is killed", async () => {
    const first = stack.services.get("health-aggregator")!;
    const [a, b] = await pollUntil(
      async () => {
        const shares = [await ownedBy(first), await ownedBy(second!)] as const;
        const all = new Set([...shares[0], ...shares[1]]);
        return shares[0].size + shares[1].size === nodeIds.length && all.size === nodeIds.length
          ? shares
          : undefined;
      },
      { timeoutMs: 20_000, message: "the nodes split between agg-1 and agg-2" },
    );
    expect(a.size).toBeGreaterThan(0);
    expect(b.size).toBeGreaterThan(0);
    await waitForStatus(stack, "Active");

    await second!.kill(); // a crash: no goodbye, its heartbeat key stays until it expires
    const killedAt = Date.now();
    await pollUntil(
      async () => {
        for (const id of nodeIds) {
          if (((await nodeState(stack, id))?.checked_at ?? 0) <= killedAt) return false;
        }
        return true;
      },
      { timeoutMs: 30_000, message: "every node polled again after agg-2 died" },
    );
    expect(await ownedBy(first)).toEqual(new Set(nodeIds));
    for (const id of nodeIds) expect((await nodeState(stack, id))?.status).toBe("Active");
    // An info line reaches the output within the logger's flush interval, not at once.
    const gone = await pollUntil(
      () => {
        const last = first
          .output()
          .split("\n")
          .filter((line) => line.includes('"msg":"aggregator replicas changed"'))
          .map((line) => JSON.parse(line) as { gone: string[]; replicas: string[] })
          .at(-1);
        return last?.gone.includes("agg-2") ? last : undefined;
      },
      { timeoutMs: 5_000, message: "agg-1 logged that agg-2 is gone" },
    );
    expect(gone).toMatchObject({ gone: ["agg-2"], replicas: ["agg-1"] });
  });
});
