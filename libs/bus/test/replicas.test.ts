import { jetstreamManager } from "@nats-io/jetstream";
import { ALL_KV_BUCKETS, JOB_STREAMS } from "@zml/contracts";
import { startNatsCluster, startNatsServer } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connectBus,
  ensureBusResources,
  natsConnectionOf,
  openKv,
  openOwnedKv,
  replicasFor,
  ReplicaUpdateError,
} from "../src/index.ts";
import type { Bus } from "../src/index.ts";

const log = { info() {}, warn() {}, error() {} };
const OWN = { env: { PATH: process.env.PATH } };
const ALL_STREAMS = [...ALL_KV_BUCKETS.map((b) => `KV_${b}`), ...Object.values(JOB_STREAMS)];

async function replicasOf(bus: Bus, stream: string): Promise<number> {
  const jsm = await jetstreamManager(natsConnectionOf(bus));
  return (await jsm.streams.info(stream)).config.num_replicas;
}

describe("replicasFor", () => {
  it("takes the configured number, else 3 on a cluster and 1 on a single server", () => {
    expect(replicasFor({ cluster: "zml" }, 2)).toBe(2);
    expect(replicasFor({}, 1)).toBe(1);
    expect(replicasFor({ cluster: "zml" })).toBe(3);
    expect(replicasFor({})).toBe(1);
    expect(replicasFor(undefined)).toBe(1);
  });
});

describe("replicas on a single server", { timeout: 30_000 }, () => {
  it("creates every stream and bucket with one replica by default", async () => {
    await using nats = await startNatsServer(OWN);
    const bus = await connectBus({ ...nats.client(), name: "replicas-single", log });
    try {
      expect(bus.replicas()).toBe(1);
      await ensureBusResources(bus);
      for (const stream of ALL_STREAMS) expect(await replicasOf(bus, stream)).toBe(1);
    } finally {
      await bus.drain();
    }
  });
});

describe("replicas on a 3-node cluster", { timeout: 90_000 }, () => {
  let cluster: NatsClusterHandle;
  beforeAll(async () => {
    cluster = await startNatsCluster(OWN);
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it("defaults to 3 and gives every stream and bucket 3 replicas, existing R1 ones included", async () => {
    // Buckets made before the setting existed: R1, as every bucket used to be.
    const old = await connectBus({ ...cluster.client(), name: "replicas-old", log, replicas: 1 });
    try {
      await openKv(old, ALL_KV_BUCKETS[0]!);
      expect(await replicasOf(old, `KV_${ALL_KV_BUCKETS[0]!}`)).toBe(1);
    } finally {
      await old.drain();
    }

    const bus = await connectBus({ ...cluster.client(), name: "replicas-default", log });
    try {
      expect(bus.replicas()).toBe(3);
      await ensureBusResources(bus);
      for (const stream of ALL_STREAMS) expect(await replicasOf(bus, stream)).toBe(3);
      // Applied again with nothing to change: still 3, no error.
      await ensureBusResources(bus);
      expect(await replicasOf(bus, `KV_${ALL_KV_BUCKETS[0]!}`)).toBe(3);
    } finally {
      await bus.drain();
    }
  });

  it("follows a configured number down as well as up, on an owner's start", async () => {
    const bucket = "replicas_owned";
    const two = await connectBus({ ...cluster.client(), name: "replicas-two", log, replicas: 2 });
    try {
      await openOwnedKv(two, bucket);
      expect(await replicasOf(two, `KV_${bucket}`)).toBe(2);
    } finally {
      await two.drain();
    }
    const three = await connectBus({ ...cluster.client(), name: "replicas-three", log });
    try {
      await openOwnedKv(three, bucket);
      expect(await replicasOf(three, `KV_${bucket}`)).toBe(3);
    } finally {
      await three.drain();
    }
  });

  it("refuses more replicas than servers with an error naming the stream", async () => {
    const bucket = "replicas_too_many";
    const bus = await connectBus({ ...cluster.client(), name: "replicas-five", log, replicas: 3 });
    const five = await connectBus({ ...cluster.client(), name: "replicas-5", log, replicas: 5 });
    try {
      await openOwnedKv(bus, bucket);
      const attempt = openOwnedKv(five, bucket);
      await expect(attempt).rejects.toBeInstanceOf(ReplicaUpdateError);
      await expect(attempt).rejects.toMatchObject({
        code: "replica_update_failed",
        stream: `KV_${bucket}`,
      });
      expect(await replicasOf(bus, `KV_${bucket}`)).toBe(3);
    } finally {
      await bus.drain();
      await five.drain();
    }
  });
});
