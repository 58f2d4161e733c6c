import type { NodeObservation, NodeSpec, NodeState } from "@zml/contracts";
import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import { pollUntil } from "@zml/harness";
import { Registry } from "@zml/telemetry";
import { afterEach, describe, expect, it } from "vitest";
import { createAggregator } from "../src/aggregator.ts";
import type { Aggregator } from "../src/aggregator.ts";
import { createAggregatorMetrics } from "../src/metrics.ts";
import { createNodeRegistry } from "../src/node-registry.ts";
import { rendezvousOwner } from "../src/rendezvous.ts";
import { FAIL, OK, captureLog, reading, spec } from "./helpers.ts";

const config = { ...DEFAULT_HEALTH_CONFIG, isolationBaseMs: 60_000 };
const fleet = new Map<string, NodeSpec>(
  Array.from({ length: 24 }, (_, i) => [`node-${i}`, spec(`node-${i}`)]),
);
/** Stands in for the node-state KV bucket that all replicas share. */
let kv: Map<string, NodeState>;
const running: Aggregator[] = [];

afterEach(() => {
  for (const a of running.splice(0)) a.stop();
});

function replica(self: string, probe: (node: NodeSpec) => Promise<ProbeResult>) {
  const published: NodeState[] = [];
  const retracted: string[] = [];
  const log = captureLog();
  const registry = new Registry();
  const aggregator = createAggregator({
    self,
    table: createNodeRegistry(config, 60_000),
    probe,
    snapshot: (id) => kv.get(id),
    publish: (state) => {
      published.push(state);
      kv.set(state.node_id, state);
    },
    retract: (id) => {
      retracted.push(id);
      kv.delete(id);
    },
    metrics: createAggregatorMetrics(registry),
    log,
    clock: Date.now,
    schedule: { intervalMs: 10, jitter: 0.1, concurrency: 8, random: Math.random },
  });
  running.push(aggregator);
  return { aggregator, published, retracted, log, registry };
}

/** Counts polls per replica and node. */
function counter() {
  const polls = new Map<string, Map<string, number>>();
  const probeAs =
    (self: string, result: (node: NodeSpec) => ProbeResult = () => OK) =>
    (node: NodeSpec) => {
      const mine = polls.get(self) ?? new Map<string, number>();
      polls.set(self, mine);
      mine.set(node.id, (mine.get(node.id) ?? 0) + 1);
      return Promise.resolve(result(node));
    };
  const count = (self: string, node: string) => polls.get(self)?.get(node) ?? 0;
  return { probeAs, count };
}

/** A failed dispatch: it lowers the node's health score, a change that is published. */
function observation(node: string): NodeObservation {
  return {
    type: "node.observation.v1",
    node_id: node,
    decision_id: "d-1",
    outcome: "http_error",
    status: 503,
    latency_ms: 42,
    ttft_ms: 7,
    at: Date.now(),
  };
}

const ownedByB = [...fleet.keys()].filter(
  (id) => rendezvousOwner(id, ["agg-a", "agg-b"]) === "agg-b",
);

describe("aggregator replicas", () => {
  it("split the nodes: every node is polled by exactly one of two replicas", async () => {
    kv = new Map();
    const { probeAs, count } = counter();
    const a = replica("agg-a", probeAs("agg-a"));
    const b = replica("agg-b", probeAs("agg-b"));
    for (const r of [a, b]) {
      r.aggregator.setReplicas(["agg-a", "agg-b"]);
      r.aggregator.setNodes(fleet);
    }
    await pollUntil(() =>
      [...fleet.keys()].every((id) => count("agg-a", id) + count("agg-b", id) >= 3),
    );
    for (const id of fleet.keys()) {
      expect(count("agg-a", id) === 0 || count("agg-b", id) === 0, id).toBe(true);
    }
    expect(a.aggregator.owned().size + b.aggregator.owned().size).toBe(fleet.size);
    expect(a.aggregator.owned().size).toBeGreaterThan(0);
    expect(b.aggregator.owned().size).toBeGreaterThan(0);
    expect(new Set(kv.keys())).toEqual(new Set(fleet.keys()));
  });

  it("take over a dead replica's nodes, starting from their published state", async () => {
    kv = new Map();
    const flaky = ownedByB[0]!;
    const { probeAs, count } = counter();
    const results = (node: NodeSpec) => (node.id === flaky ? FAIL : OK);
    const a = replica("agg-a", probeAs("agg-a", results));
    const b = replica("agg-b", probeAs("agg-b", results));
    for (const r of [a, b]) {
      r.aggregator.setReplicas(["agg-a", "agg-b"]);
      r.aggregator.setNodes(fleet);
    }
    await pollUntil(() => kv.get(flaky)?.status === "Isolated");
    expect(count("agg-a", flaky)).toBe(0);

    b.aggregator.stop(); // b dies; a learns it from the replica set
    a.aggregator.setReplicas(["agg-a"]);
    await pollUntil(() => ownedByB.every((id) => count("agg-a", id) >= 2));
    expect(a.aggregator.owned().size).toBe(fleet.size);
    // Restored on probation from the snapshot, the failing node is isolated again at once,
    // for twice as long; taken over fresh it would only have been Degraded.
    const moved = a.log.lines.find((l) => l.msg === "node state changed" && l.node === flaky);
    expect(moved).toMatchObject({ from: "Degraded+probe_pending", to: "Isolated" });
    expect(String(moved?.reason)).toMatch(/probation.*isolated for 120 s/);
    expect(
      a.log.lines.find((l) => l.msg === "node ownership changed" && l.gained === ownedByB.length),
    ).toBeDefined();
  });

  it("hand nodes to a joining replica and stop polling them", async () => {
    kv = new Map();
    const { probeAs, count } = counter();
    const a = replica("agg-a", probeAs("agg-a"));
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(fleet);
    await pollUntil(() => [...fleet.keys()].every((id) => count("agg-a", id) >= 1));
    a.aggregator.setReplicas(["agg-a", "agg-b"]);
    const frozen = ownedByB.map((id) => count("agg-a", id));
    const other = [...fleet.keys()].find((id) => !ownedByB.includes(id))!;
    const start = count("agg-a", other);
    await pollUntil(() => count("agg-a", other) >= start + 3);
    // At most the poll already running when ownership moved.
    ownedByB.forEach((id, i) => expect(count("agg-a", id)).toBeLessThanOrEqual(frozen[i]! + 1));
    const text = await a.registry.metrics();
    expect(text).not.toContain(`node="${ownedByB[0]}"`);
    expect(text).toContain(`zml_aggregator_owned_nodes ${fleet.size - ownedByB.length}`);
  });

  it("drop the result of a probe that was running when the node moved away", async () => {
    kv = new Map();
    const target = ownedByB[0]!;
    let release: (r: ProbeResult) => void = () => {};
    let started = false;
    const a = replica("agg-a", (node) => {
      if (node.id !== target) return Promise.resolve(OK);
      started = true;
      return new Promise<ProbeResult>((r) => (release = r));
    });
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(new Map([[target, spec(target)]]));
    await pollUntil(() => started);
    a.aggregator.setReplicas(["agg-a", "agg-b"]);
    release(OK);
    await new Promise((r) => setImmediate(r));
    expect(a.published).toEqual([]);
  });
});

describe("an aggregator replica", () => {
  it("applies observations for its own nodes and ignores the others'", async () => {
    kv = new Map();
    const mine = [...fleet.keys()].find((id) => !ownedByB.includes(id))!;
    const a = replica("agg-a", () => Promise.resolve(OK));
    a.aggregator.setReplicas(["agg-a", "agg-b"]);
    a.aggregator.setNodes(fleet);
    await pollUntil(() => kv.has(mine));
    const before = kv.get(mine)!.health_score;
    a.aggregator.observe([observation(ownedByB[0]!)]);
    a.aggregator.observe([observation(mine)]);
    expect(kv.get(mine)!.health_score).toBeLessThan(before);
    expect(a.published.some((s) => s.node_id === ownedByB[0])).toBe(false);
  });

  it("logs each state change with node, from, to and reason, and exports it as metrics", async () => {
    kv = new Map();
    let fail = false;
    const a = replica("agg-a", () => Promise.resolve(fail ? FAIL : OK));
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(new Map([["h100-a", spec("h100-a")]]));
    await pollUntil(() => kv.get("h100-a")?.status === "Active");
    let text = await a.registry.metrics();
    expect(text).toMatch(/zml_node_state\{node="h100-a",status="Active"\} 1/);
    expect(text).toMatch(/zml_node_state\{node="h100-a",status="Degraded"\} 0/);
    expect(text).toMatch(/zml_node_queue_depth\{node="h100-a"\} 1/);
    expect(text).toMatch(/zml_node_health_score\{node="h100-a"\} \d/);
    expect(text).toMatch(/zml_aggregator_probes_total\{outcome="ok"\} [1-9]/);
    expect(text).toMatch(/zml_aggregator_probe_duration_seconds_count\{outcome="ok"\} [1-9]/);
    fail = true;
    await pollUntil(() => kv.get("h100-a")?.status === "Isolated");
    const changes = a.log.lines.filter((l) => l.msg === "node state changed");
    expect(changes.map((l) => `${String(l.from)}>${String(l.to)}`)).toEqual([
      "new>Active",
      "Active>Degraded",
      "Degraded>Isolated",
    ]);
    expect(changes.every((l) => l.node === "h100-a" && typeof l.reason === "string")).toBe(true);
    text = await a.registry.metrics();
    expect(text).toMatch(/zml_node_state\{node="h100-a",status="Isolated"\} 1/);
    expect(text).toMatch(/zml_aggregator_probes_total\{outcome="failed"\} [1-9]/);
  });

  it("logs why probes fail at warn level once per different reason, and the recovery", async () => {
    kv = new Map();
    let result: ProbeResult = OK;
    let probes = 0;
    const a = replica("agg-a", () => {
      probes++;
      return Promise.resolve(result);
    });
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(new Map([["h100-a", spec("h100-a")]]));
    await pollUntil(() => kv.get("h100-a")?.status === "Active");
    const failed = () => a.log.lines.filter((l) => l.msg === "probe failed");
    result = { ok: false, error: "health endpoint answered 503: Loading model" };
    let from = probes;
    await pollUntil(() => probes >= from + 4);
    result = { ok: false, error: "unreadable vllm metrics: missing series vllm:x" };
    from = probes;
    await pollUntil(() => probes >= from + 3);
    expect(kv.get("h100-a")?.last_error).toBe("unreadable vllm metrics: missing series vllm:x");
    // A node whose probes fail is never shown at full health.
    expect(kv.get("h100-a")?.health_score).toBeLessThan(50);
    result = OK;
    await pollUntil(() => a.log.lines.some((l) => l.msg === "probe succeeded again"));
    expect(failed().map((l) => [l.level, l.node, l.error])).toEqual([
      ["warn", "h100-a", "health endpoint answered 503: Loading model"],
      ["warn", "h100-a", "unreadable vllm metrics: missing series vllm:x"],
    ]);
  });

  it("warns once when a llama.cpp node's slots and its max_concurrency differ", async () => {
    kv = new Map();
    let probes = 0;
    const a = replica("agg-a", () => {
      probes++;
      return Promise.resolve({ ok: true, reading: reading({ slots: 2 }) });
    });
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(new Map([["cpu-a", spec("cpu-a", 8)]]));
    await pollUntil(() => probes >= 4);
    const notes = a.log.lines.filter((l) => l.node === "cpu-a" && l.slots !== undefined);
    expect(notes).toEqual([
      {
        node: "cpu-a",
        slots: 2,
        max_concurrency: 8,
        level: "warn",
        msg: "node has fewer slots than its max_concurrency: requests beyond them wait in its own queue",
      },
    ]);
  });

  it("retracts a node removed from the fleet and forgets its metrics", async () => {
    kv = new Map();
    const a = replica("agg-a", () => Promise.resolve(OK));
    a.aggregator.setReplicas(["agg-a"]);
    a.aggregator.setNodes(
      new Map([
        ["h100-a", spec("h100-a")],
        ["h100-b", spec("h100-b")],
      ]),
    );
    await pollUntil(() => kv.has("h100-a") && kv.has("h100-b"));
    a.aggregator.setNodes(new Map([["h100-b", spec("h100-b")]]));
    expect(a.retracted).toEqual(["h100-a"]);
    expect(kv.has("h100-a")).toBe(false);
    expect(await a.registry.metrics()).not.toContain('node="h100-a"');
    expect(a.aggregator.owned()).toEqual(new Set(["h100-b"]));
  });
});
