import { DEFAULT_HEALTH_CONFIG } from "@zml/health";
import { describe, expect, it } from "vitest";
import { createNodeRegistry } from "../src/node-registry.ts";
import { FAIL, OK, reading, spec } from "./helpers.ts";

const T0 = 1_750_000_000_000;
const config = { ...DEFAULT_HEALTH_CONFIG, isolationBaseMs: 10_000 };
const HEARTBEAT = 60_000;
const node = spec("h100-a");

describe("node registry", () => {
  it("publishes the first state and every change, not repeats, and a heartbeat", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    expect(table.onProbe(node, OK, T0).publish).toBe(true);
    expect(table.onProbe(node, OK, T0 + 1_000).publish).toBe(false);
    const busier = { ok: true as const, reading: reading({ running: 3, queueDepth: 3 }) };
    expect(table.onProbe(node, busier, T0 + 2_000).publish).toBe(true);
    expect(table.onProbe(node, busier, T0 + 3_000).publish).toBe(false);
    expect(table.onProbe(node, busier, T0 + 2_000 + HEARTBEAT).publish).toBe(true);
  });

  it("publishes a new probe failure reason and a prefix-cache hit rate that moved", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    const cache = (queries: number, hits: number) => ({
      ok: true as const,
      reading: reading({ prefixCache: { kind: "counters", queries, hits } }),
    });
    expect(table.onProbe(node, cache(100, 0), T0).publish).toBe(true);
    // 90 of 100 prompt tokens from cache: 0.9.
    expect(table.onProbe(node, cache(200, 90), T0 + 1_000).publish).toBe(true);
    expect(table.onProbe(node, cache(300, 181), T0 + 2_000).publish).toBe(false);
    // No prompt: unknown again.
    expect(table.onProbe(node, cache(300, 181), T0 + 3_000).publish).toBe(true);
    const failing = (error: string) => ({ ok: false as const, error });
    expect(table.onProbe(node, failing("no HTTP answer from the node"), T0 + 4_000).publish).toBe(
      true,
    );
    // Once every probe in the window failed the score rests at 0: only a new reason publishes.
    for (let i = 5; i <= 10; i++)
      table.onProbe(node, failing("no HTTP answer from the node"), T0 + i * 1_000);
    expect(table.onProbe(node, failing("no HTTP answer from the node"), T0 + 11_000).publish).toBe(
      false,
    );
    expect(table.onProbe(node, failing("health endpoint answered 503"), T0 + 12_000).publish).toBe(
      true,
    );
  });

  it("says which registered models a vLLM node's engine does not serve, and publishes the change", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    const vllmNode = { ...node, models: ["llama-3.1-8b", "mistral-7b"] };
    const serving = (servedModels: string[] | null) => ({
      ok: true as const,
      reading: reading({ servedModels }),
    });
    expect(table.onProbe(vllmNode, serving(null), T0).state.unserved_models).toEqual([]);
    const partial = table.onProbe(vllmNode, serving(["llama-3.1-8b"]), T0 + 1_000);
    expect(partial.publish).toBe(true);
    expect(partial.state).toMatchObject({
      served_models: ["llama-3.1-8b"],
      unserved_models: ["mistral-7b"],
      status: "Active",
    });
    // A llama.cpp node answers any name with its one model: nothing is withheld.
    const llama = { ...node, id: "cpu-a", framework: "llamacpp" as const, models: ["tiny"] };
    expect(table.onProbe(llama, serving(["tiny.gguf"]), T0).state.unserved_models).toEqual([]);
  });

  it("reports each status change with its reason, including an isolation running out", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    expect(table.onProbe(node, OK, T0).transitions).toEqual([
      { from: "new", to: "Active", reason: "probe succeeded" },
    ]);
    const degraded = table.onProbe(node, FAIL, T0 + 1_000).transitions;
    expect(degraded).toHaveLength(1);
    expect(degraded[0]).toMatchObject({ from: "Active", to: "Degraded" });
    expect(degraded[0]!.reason).toMatch(/503/);
    expect(table.onProbe(node, FAIL, T0 + 2_000).transitions).toEqual([]);
    const isolated = table.onProbe(node, FAIL, T0 + 3_000).transitions;
    expect(isolated[0]).toMatchObject({ from: "Degraded", to: "Isolated" });
    const back = table.onProbe(node, OK, T0 + 3_000 + config.isolationBaseMs + 1);
    expect(back.transitions).toEqual([
      { from: "Isolated", to: "Degraded+probe_pending", reason: "isolation period over" },
      { from: "Degraded+probe_pending", to: "Active", reason: "probe succeeded" },
    ]);
    expect(back.publish).toBe(true);
  });

  it("ignores observations for nodes it does not track", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    const obs = {
      type: "node.observation.v1" as const,
      node_id: "h100-a",
      decision_id: "d",
      outcome: "ok" as const,
      status: 200,
      latency_ms: 10,
      ttft_ms: 5,
      at: T0,
    };
    expect(table.onObservations([obs], T0)).toEqual([]);
    table.onProbe(node, OK, T0);
    expect(table.onObservations([obs], T0 + 1)[0]?.state.latency_ewma_ms).toBe(10);
  });

  it("folds a batch of one node's outcomes in order into one update, as one by one would", () => {
    const outcome = (k: number, failed: boolean) => ({
      type: "node.observation.v1" as const,
      node_id: "h100-a",
      decision_id: `d${k}`,
      outcome: failed ? ("http_error" as const) : ("ok" as const),
      status: failed ? 503 : 200,
      latency_ms: 10 + k,
      ttft_ms: 5,
      at: T0 + 1_000 + k,
    });
    // Enough failures to demote the node: the batch must end where one by one ends.
    const batch = Array.from({ length: 30 }, (_, k) => outcome(k, k % 3 !== 0));
    const one = createNodeRegistry(config, HEARTBEAT);
    const all = createNodeRegistry(config, HEARTBEAT);
    for (const t of [one, all]) t.onProbe(node, OK, T0);
    const steps = batch.map((o) => one.onObservations([o], T0 + 2_000));
    const folded = all.onObservations(batch, T0 + 2_000);
    expect(folded).toHaveLength(1);
    expect(folded[0]!.state).toEqual(steps.at(-1)![0]!.state);
    expect(folded[0]!.state.status).toBe("Degraded");
    expect(folded[0]!.publish).toBe(true);
  });

  it("restores a node from a snapshot and publishes its next update", () => {
    const first = createNodeRegistry(config, HEARTBEAT);
    first.onProbe(node, OK, T0);
    const active = first.onProbe(node, OK, T0 + 1_000).state;
    const second = createNodeRegistry(config, HEARTBEAT);
    second.restore(node, active, T0 + 5_000);
    expect(second.has("h100-a")).toBe(true);
    const next = second.onProbe(node, OK, T0 + 6_000);
    expect(next.publish).toBe(true);
    expect(next.transitions).toEqual([]);
    expect(next.state).toMatchObject({ status: "Active", instance_id: "inst-a" });
    second.forget("h100-a");
    expect(second.has("h100-a")).toBe(false);
  });

  it("publishes a new instance id at once", () => {
    const table = createNodeRegistry(config, HEARTBEAT);
    table.onProbe(node, OK, T0);
    const replaced = table.onProbe(
      node,
      { ok: true, reading: reading({ instanceId: "inst-b" }) },
      T0 + 1_000,
    );
    expect(replaced.publish).toBe(true);
    expect(replaced.state.instance_id).toBe("inst-b");
  });
});
