import type { NodeObservation } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { describe, expect, it } from "vitest";
import { createObservationBatcher } from "../src/capacity/observation-batcher.ts";

const obs = (node: string, i: number): NodeObservation => ({
  type: "node.observation.v1",
  node_id: node,
  decision_id: `d${i}`,
  outcome: "ok",
  status: 200,
  latency_ms: i,
  ttft_ms: null,
  at: i,
});

describe("observation batcher", () => {
  it("sends one batch per node per window, in order", async () => {
    const sent: Array<[string, number[]]> = [];
    const b = createObservationBatcher({
      flushMs: 20,
      maxBatch: 100,
      send: (node, list) => sent.push([node, list.map((o) => o.latency_ms)]),
    });
    for (let i = 0; i < 5; i++) b.add(obs(i % 2 ? "a" : "b", i));
    expect(sent).toEqual([]);
    await pollUntil(() => sent.length === 2);
    expect(new Map(sent)).toEqual(
      new Map([
        ["b", [0, 2, 4]],
        ["a", [1, 3]],
      ]),
    );
  });

  it("flushes at once when a node's batch is full, and on demand", () => {
    const sent: Array<[string, number]> = [];
    const b = createObservationBatcher({
      flushMs: 60_000,
      maxBatch: 3,
      send: (node, list) => sent.push([node, list.length]),
    });
    for (let i = 0; i < 3; i++) b.add(obs("a", i));
    expect(sent).toEqual([["a", 3]]);
    b.add(obs("a", 9));
    b.flush();
    expect(sent).toEqual([
      ["a", 3],
      ["a", 1],
    ]);
  });
});
