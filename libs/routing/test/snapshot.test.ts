import { describe, expect, it } from "vitest";
import { buildSnapshot, CostEntrySchema, QualityScoreSchema } from "../src/index.ts";
import { MODEL, node, NOW, onPrem, quality } from "./fixtures.ts";

describe("buildSnapshot", () => {
  it("indexes nodes by model, tier and family", () => {
    const snapshot = buildSnapshot({
      nodes: [
        node("a", { models: [MODEL, "other"] }),
        node("b", { tier: 2 }),
        node("c", { accelerator_family: "MI300X" }),
      ],
    });
    const t1 = snapshot.buckets.get(MODEL)?.[1];
    expect(t1?.size).toBe(2);
    expect([...t1!.families.keys()]).toEqual(["H100", "MI300X"]);
    expect(
      snapshot.buckets
        .get(MODEL)?.[2]
        ?.families.get("H100")
        ?.nodes.map((e) => e.spec.id),
    ).toEqual(["b"]);
    expect(snapshot.buckets.get("other")?.[1]?.size).toBe(1);
    expect(snapshot.buckets.get(MODEL)?.[3]).toBeUndefined();
  });

  it("orders nodes by registration, keeping the first of a repeated id", () => {
    const snapshot = buildSnapshot({
      nodes: [
        node("late", { registered_at: 9 }),
        node("early", { registered_at: 1 }),
        node("late", { tier: 2 }),
      ],
    });
    expect(snapshot.nodes.map((e) => e.spec.id)).toEqual(["early", "late"]);
    expect(snapshot.nodes[1]!.spec.tier).toBe(1);
    expect(snapshot.warnings).toEqual(["node late registered twice; the first one is kept"]);
  });

  it("prices a node from its own entry before its family's, per node-hour", () => {
    const spot = CostEntrySchema.parse({
      kind: "cloud_spot",
      cloud_account: "aws-eu",
      family: "H100",
      nodes: ["spot"],
      usd_per_gpu_hour: 2.5,
      gpus_per_node: 8,
      updated_at: NOW,
    });
    const snapshot = buildSnapshot({
      nodes: [
        node("spot"),
        node("own"),
        node("family"),
        node("none", { accelerator_family: "L40S" }),
      ],
      costs: [onPrem({ family: "H100" }, 1), spot, onPrem({ node_id: "own" }, 3)],
    });
    const price = Object.fromEntries(snapshot.nodes.map((e) => [e.spec.id, e.usdPerHour]));
    expect(price).toEqual({ spot: 20, own: 3, family: 1, none: null });
    expect(snapshot.fallbackUsdPerHour).toBe(20);
  });

  it("ignores a spot price for a node of another family, and says so", () => {
    const snapshot = buildSnapshot({
      nodes: [node("m", { accelerator_family: "MI300X" })],
      costs: [
        {
          kind: "cloud_spot",
          cloud_account: "gcp",
          family: "H100",
          nodes: ["m", "ghost"],
          usd_per_gpu_hour: 2,
          gpus_per_node: 1,
          updated_at: NOW,
        },
      ],
    });
    expect(snapshot.nodes[0]!.usdPerHour).toBeNull();
    expect(snapshot.warnings).toHaveLength(2);
  });

  it("keeps the most recent quality score, node scores before family scores", () => {
    const snapshot = buildSnapshot({
      nodes: [node("a"), node("b")],
      quality: [
        quality({ node_id: "a" }, 50, NOW - 10),
        quality({ node_id: "a" }, 70, NOW),
        quality({ node_id: "a" }, 90, NOW - 20),
        quality({ family: "H100" }, 10),
      ],
    });
    const group = snapshot.buckets.get(MODEL)![1]!.families.get("H100")!;
    expect(group.quality.map((q) => q?.score)).toEqual([70, 10]);
  });
});

describe("schemas", () => {
  it("an on-prem entry names exactly one of node_id and family", () => {
    expect(
      CostEntrySchema.safeParse({ kind: "on_prem", family: "H100", usd_per_gpu_hour: 1 }).success,
    ).toBe(true);
    expect(
      CostEntrySchema.parse({ kind: "on_prem", node_id: "n1", usd_per_gpu_hour: 1 }),
    ).toMatchObject({ gpus_per_node: 1 });
    expect(CostEntrySchema.safeParse({ kind: "on_prem", usd_per_gpu_hour: 1 }).success).toBe(false);
    expect(
      CostEntrySchema.safeParse({
        kind: "on_prem",
        node_id: "n1",
        family: "H100",
        usd_per_gpu_hour: 1,
      }).success,
    ).toBe(false);
  });

  it("rejects negative prices, unknown kinds and spot prices without nodes", () => {
    expect(
      CostEntrySchema.safeParse({ kind: "on_prem", family: "H100", usd_per_gpu_hour: -1 }).success,
    ).toBe(false);
    expect(
      CostEntrySchema.safeParse({ kind: "reserved", family: "H100", usd_per_gpu_hour: 1 }).success,
    ).toBe(false);
    expect(
      CostEntrySchema.safeParse({
        kind: "cloud_spot",
        cloud_account: "a",
        family: "H100",
        nodes: [],
        usd_per_gpu_hour: 1,
        updated_at: 0,
      }).success,
    ).toBe(false);
  });

  it("a quality score is 0–100 and scoped to a node or a family", () => {
    const base = { model: MODEL, source: "bench", updated_at: NOW };
    expect(QualityScoreSchema.safeParse({ ...base, family: "H100", score: 88 }).success).toBe(true);
    expect(QualityScoreSchema.safeParse({ ...base, family: "H100", score: 101 }).success).toBe(
      false,
    );
    expect(QualityScoreSchema.safeParse({ ...base, score: 50 }).success).toBe(false);
  });
});
