import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connectBus, natsConnectionOf } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { startNatsCluster } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

// The cluster harness itself, seen by a real client: what every cluster test builds on.
describe("a 3-node NATS cluster from the harness", { timeout: 120_000 }, () => {
  let cluster: NatsClusterHandle;
  let bus: Bus;
  beforeAll(async () => {
    cluster = await startNatsCluster({ env: { PATH: process.env.PATH } });
    bus = await connectBus({ ...cluster.client(), name: "cluster-smoke", log: quiet });
  }, 60_000);
  afterAll(async () => {
    await bus?.drain();
    await cluster?.stop();
  });

  it("keeps an R3 stream writable and its messages readable through the SIGKILL of its leader", async () => {
    const nc = natsConnectionOf(bus);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "SMOKE", subjects: ["smoke.>"], num_replicas: 3 });
    const js = jetstream(nc);
    for (let i = 0; i < 5; i++) await js.publish("smoke.before", `b${i}`);

    const leaderName = (await jsm.streams.info("SMOKE")).cluster?.leader;
    const leader = cluster.servers.find((s) => s.name === leaderName);
    expect(leader).toBeDefined();
    await leader!.kill();

    // A new stream leader is elected among the two survivors; publishes are acked again.
    const deadline = Date.now() + 30_000;
    let acked = 0;
    while (acked < 5 && Date.now() < deadline) {
      try {
        await js.publish("smoke.during", `d${acked}`, { timeout: 2_000 });
        acked += 1;
      } catch {
        // no leader yet, or our connection is moving to a survivor
      }
    }
    expect(acked).toBe(5);
    const info = await jsm.streams.info("SMOKE");
    expect(info.state.messages).toBe(10);
    expect(info.cluster?.leader).not.toBe(leaderName);

    await leader!.start();
    expect(leader!.isRunning()).toBe(true);
  });
});
