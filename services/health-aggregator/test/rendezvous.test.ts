import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ownedKeys, rendezvousOwner } from "../src/rendezvous.ts";

const nodes = Array.from({ length: 600 }, (_, i) => `node-${i}`);
const replicaId = fc.stringMatching(/^[A-Za-z0-9_-]{1,24}$/);

describe("rendezvousOwner", () => {
  it("has no owner without replicas, and the only replica owns everything", () => {
    expect(rendezvousOwner("node-1", [])).toBeUndefined();
    expect(nodes.every((n) => rendezvousOwner(n, ["solo"]) === "solo")).toBe(true);
  });

  it("does not depend on the order of the replicas or on duplicates", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(replicaId, { minLength: 1, maxLength: 6 }),
        fc.string(),
        (replicas, key) => {
          const owner = rendezvousOwner(key, replicas);
          expect(replicas).toContain(owner);
          expect(rendezvousOwner(key, [...replicas].reverse())).toBe(owner);
          expect(rendezvousOwner(key, [...replicas, ...replicas])).toBe(owner);
        },
      ),
    );
  });

  it("moves only the leaving replica's keys, and never moves a key between survivors", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(replicaId, { minLength: 2, maxLength: 6 }),
        fc.nat(),
        (replicas, pick) => {
          const gone = replicas[pick % replicas.length]!;
          const survivors = replicas.filter((r) => r !== gone);
          for (const node of nodes.slice(0, 60)) {
            const before = rendezvousOwner(node, replicas);
            const after = rendezvousOwner(node, survivors);
            if (before !== gone) expect(after).toBe(before);
            else expect(survivors).toContain(after);
          }
        },
      ),
    );
  });

  it("moves to a joining replica only keys that it then owns", () => {
    const before = ["agg-a", "agg-b"];
    const after = [...before, "agg-c"];
    for (const node of nodes) {
      const owner = rendezvousOwner(node, after);
      if (owner !== "agg-c") expect(owner).toBe(rendezvousOwner(node, before));
    }
  });

  it("spreads keys roughly evenly", () => {
    const replicas = ["aggregator-0", "aggregator-1", "aggregator-2"];
    const counts = new Map<string, number>();
    for (const node of nodes) {
      const owner = rendezvousOwner(node, replicas)!;
      counts.set(owner, (counts.get(owner) ?? 0) + 1);
    }
    for (const r of replicas) {
      // 200 expected each; a broken hash (everything to one replica) is far outside this.
      expect(counts.get(r)).toBeGreaterThan(140);
      expect(counts.get(r)).toBeLessThan(260);
    }
  });
});

describe("ownedKeys", () => {
  it("partitions the keys: every key has exactly one owner among the live replicas", () => {
    const replicas = ["agg-1", "agg-2", "agg-3"];
    const shares = replicas.map((r) => ownedKeys(r, nodes, replicas));
    expect(shares.reduce((n, s) => n + s.size, 0)).toBe(nodes.length);
    expect(new Set(shares.flatMap((s) => [...s])).size).toBe(nodes.length);
  });

  it("gives nothing to a replica that is not in the live set", () => {
    expect(ownedKeys("ghost", nodes, ["agg-1", "agg-2"]).size).toBe(0);
  });
});
