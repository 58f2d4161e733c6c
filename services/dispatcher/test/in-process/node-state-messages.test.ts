// Node state reaches routing from the aggregator's broadcast as well as the KV bucket: with
// the bucket unreachable (its stream between leaders) a Degraded node must still be avoided.
import { openKv, publishJson } from "@zml/bus";
import { KV_BUCKETS, NodeStateSchema, nodeStateSubject } from "@zml/contracts";
import type { NodeState } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { afterEach, describe, expect, it } from "vitest";
import { createNodeStateFeed } from "../../src/fleet/node-state-feed.ts";
import { activeState, startRig } from "./dispatcher-rig.ts";
import type { Rig } from "./dispatcher-rig.ts";

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.stop();
  rig = undefined;
});

const ordered = chainPolicy("ordered", ["H100", "MI300X"]);

function stateOf(
  rigNode: { id: string; family: string },
  instanceId: string,
  at: number,
  status: NodeState["status"],
): NodeState {
  return { ...activeState(rigNode, instanceId, at), status, checked_at: at };
}

describe("createNodeStateFeed", () => {
  const base = stateOf({ id: "n1", family: "H100" }, "i", 1_000, "Active");
  it("takes a newer or equally recent state and drops an older one", () => {
    const feed = createNodeStateFeed([base]);
    expect(feed.offer({ ...base, status: "Degraded", checked_at: 2_000 })).toBe(true);
    expect(feed.offer({ ...base, status: "Active", checked_at: 1_500 })).toBe(false);
    expect(feed.map.get("n1")?.status).toBe("Degraded");
    // Same probe time, changed by observations between probes: taken.
    expect(feed.offer({ ...base, status: "Isolated", checked_at: 2_000 })).toBe(true);
    expect(feed.map.get("n1")?.status).toBe("Isolated");
    expect(feed.remove("n1")).toBe(true);
    expect(feed.remove("n1")).toBe(false);
    expect(feed.offer(base)).toBe(true);
  });
});

describe("dispatcher in process: node state from messages", () => {
  it("stops routing to a node a state message marks Degraded, without the bucket, and ignores an older KV replay", async () => {
    rig = await startRig({
      nodes: [
        { id: "h1", family: "H100" },
        { id: "m1", family: "MI300X" },
      ],
      policies: [ordered],
    });
    const h1 = { id: "h1", family: "H100" };
    const instance = rig.sims.get("h1")!.instanceId;
    expect((await rig.send({ policy: "ordered" })).routing?.node).toBe("h1");

    const degradedAt = Date.now() + 1_000;
    publishJson(
      rig.bus,
      nodeStateSubject("h1"),
      NodeStateSchema,
      stateOf(h1, instance, degradedAt, "Degraded"),
    );
    const r = rig;
    await pollUntil(async () => (await r.send({ policy: "ordered" })).routing?.node === "m1", {
      timeoutMs: 10_000,
      message: "requests to leave the Degraded node",
    });
    const before = rig.payloads().h1;
    for (let i = 0; i < 5; i++)
      expect((await rig.send({ policy: "ordered" })).routing?.node).toBe("m1");

    // The bucket comes back with what it held before the broadcast: older, so not applied.
    const states = await openKv(rig.bus, KV_BUCKETS.nodeState);
    await states.put("h1", JSON.stringify(stateOf(h1, instance, degradedAt - 500, "Active")));
    for (let i = 0; i < 5; i++)
      expect((await rig.send({ policy: "ordered" })).routing?.node).toBe("m1");
    expect(rig.payloads().h1).toBe(before);

    // A newer state through the bucket alone is applied as before.
    await states.put("h1", JSON.stringify(stateOf(h1, instance, degradedAt + 1_000, "Active")));
    await pollUntil(async () => (await r.send({ policy: "ordered" })).routing?.node === "h1", {
      timeoutMs: 10_000,
      message: "requests to return to the Active node",
    });
  });
});
