import { connectBus, natsConnectionOf, openKv } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import { KV_BUCKETS } from "@zml/contracts";
import { pollUntil, startNatsServer } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { joinReplicaSet } from "../src/membership.ts";
import type { Membership } from "../src/membership.ts";

const log = { info() {}, warn() {}, error() {} };
let nats: NatsServerHandle;
let bus: Bus;
let kv: KV;
const members: Membership[] = [];
const buses: Bus[] = [];

beforeAll(async () => {
  nats = await startNatsServer();
  bus = await connectBus({ ...nats.client(), name: "membership-test", log });
}, 30_000);
afterAll(async () => {
  await Promise.all(members.map((m) => m.leave()));
  await Promise.all(buses.map((b) => b.drain().catch(() => undefined)));
  await bus?.drain();
  await nats?.stop();
});
beforeEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.leave()));
  kv = await openKv(bus, KV_BUCKETS.aggregators);
  for await (const key of await kv.keys()) await kv.delete(key);
});

/** Joins as `self` over its own connection, so that closing it looks like a crash. */
async function join(self: string, ttlMs: number) {
  const own = await connectBus({ ...nats.client(), name: self, log });
  buses.push(own);
  const changes: string[][] = [];
  const member = await joinReplicaSet({
    kv: await openKv(own, KV_BUCKETS.aggregators),
    self,
    ttlMs,
    clock: Date.now,
    isConnected: () => own.isConnected(),
    log,
    onChange: (replicas) => changes.push([...replicas]),
  });
  members.push(member);
  return { member, changes, bus: own };
}

describe("aggregator replica set", () => {
  it("lets replicas find each other", async () => {
    const a = await join("agg-a", 1_500);
    const b = await join("agg-b", 1_500);
    expect(b.member.replicas()).toEqual(["agg-a", "agg-b"]);
    await pollUntil(() => a.member.replicas().length === 2);
    expect(a.changes.at(-1)).toEqual(["agg-a", "agg-b"]);
  });

  it("drops a replica that stops heartbeating once the TTL has passed", async () => {
    const a = await join("agg-a", 900);
    const b = await join("agg-b", 900);
    await pollUntil(() => a.member.replicas().length === 2);
    natsConnectionOf(b.bus)
      .close()
      .catch(() => undefined); // b crashes: no goodbye, its key stays behind
    await pollUntil(() => a.member.replicas().length === 1, { timeoutMs: 15_000 });
    expect(a.member.replicas()).toEqual(["agg-a"]);
    expect(a.changes.at(-1)).toEqual(["agg-a"]);
  });

  it("drops a replica that leaves at once, without waiting for the TTL", async () => {
    const a = await join("agg-a", 120_000);
    const b = await join("agg-b", 120_000);
    await pollUntil(() => a.member.replicas().length === 2);
    await b.member.leave();
    await pollUntil(() => a.member.replicas().length === 1);
    expect(await kv.get("agg-b")).toMatchObject({ operation: "DEL" });
  });

  it("ignores and removes entries left by replicas that died long ago", async () => {
    const longAgo = Date.now() - 60_000;
    await kv.put(
      "agg-ghost",
      JSON.stringify({
        type: "aggregator.heartbeat.v1",
        replica_id: "agg-ghost",
        started_at: longAgo,
        at: longAgo,
      }),
    );
    const a = await join("agg-a", 1_500);
    expect(a.member.replicas()).toEqual(["agg-a"]);
    await pollUntil(async () => (await kv.get("agg-ghost"))?.operation === "DEL");
  });
});
