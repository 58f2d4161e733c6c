import { connectBus, natsConnectionOf, openKv, openOwnedKv } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import { startBusRig } from "@zml/bus/testing";
import type { BusRig } from "@zml/bus/testing";
import { KV_BUCKETS } from "@zml/contracts";
import { pollUntil, startNatsCluster } from "@zml/harness";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { joinReplicaSet } from "../src/membership.ts";
import type { Membership } from "../src/membership.ts";

const log = { info() {}, warn() {}, error() {} };
let rig: BusRig;
let kv: KV;
const members: Membership[] = [];
const buses: Bus[] = [];

beforeAll(async () => {
  rig = await startBusRig({ name: "membership-test" });
}, 30_000);
afterAll(async () => {
  await Promise.all(members.map((m) => m.leave()));
  await Promise.all(buses.map((b) => b.drain().catch(() => undefined)));
  await rig?.stop();
});
beforeEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.leave()));
  kv = await openKv(rig.bus, KV_BUCKETS.aggregators);
  for await (const key of await kv.keys()) await kv.delete(key);
});

/** Joins as `self` over its own connection, so that closing it looks like a crash. */
async function join(self: string, ttlMs: number) {
  const own = await connectBus({ ...rig.nats.client(), name: self, log });
  buses.push(own);
  const changes: string[][] = [];
  const member = await joinReplicaSet({
    bus: own,
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

describe("aggregator replica set while its bucket is unreachable", { timeout: 120_000 }, () => {
  it("declares nobody dead while the bucket has no quorum, and judges again once it is back", async () => {
    await using cluster = await startNatsCluster({ env: { PATH: process.env.PATH } });
    const own: Bus[] = [];
    const joined: Membership[] = [];
    const joinOn = async (self: string) => {
      const b = await connectBus({ ...cluster.client(), name: self, log });
      own.push(b);
      const member = await joinReplicaSet({
        bus: b,
        kv: await openKv(b, KV_BUCKETS.aggregators),
        self,
        ttlMs: 900,
        clock: Date.now,
        isConnected: () => b.isConnected(),
        log,
        onChange: () => {},
      });
      joined.push(member);
      return { member, bus: b };
    };
    try {
      const admin = await connectBus({ ...cluster.client(), name: "setup", log, replicas: 3 });
      own.push(admin);
      await openOwnedKv(admin, KV_BUCKETS.aggregators);
      const a = await joinOn("agg-a");
      const b = await joinOn("agg-b");
      await pollUntil(() => a.member.replicas().length === 2 && b.member.replicas().length === 2);

      // Two of three servers gone: connections stay up (to the third), the bucket cannot
      // be written or read. Both replicas keep each other for many TTLs.
      const [, second, third] = cluster.servers;
      await Promise.all([second!.kill(), third!.kill()]);
      const until = Date.now() + 6_000;
      while (Date.now() < until) {
        expect(a.member.replicas()).toEqual(["agg-a", "agg-b"]);
        expect(b.member.replicas()).toEqual(["agg-a", "agg-b"]);
        await new Promise((r) => setTimeout(r, 200));
      }
      await Promise.all([second!.start(), third!.start()]);

      // Judging resumes: a replica that now crashes is dropped by the other.
      await new Promise((r) => setTimeout(r, 2_000));
      expect(a.member.replicas()).toEqual(["agg-a", "agg-b"]);
      natsConnectionOf(b.bus)
        .close()
        .catch(() => undefined);
      await pollUntil(() => a.member.replicas().length === 1, {
        timeoutMs: 30_000,
        message: "agg-a to drop the crashed agg-b",
      });
    } finally {
      await Promise.all(joined.map((m) => m.leave().catch(() => undefined)));
      await Promise.all(own.map((x) => x.drain().catch(() => undefined)));
    }
  });
});
