import { connect as connectTcp } from "node:net";
import { jetstreamManager } from "@nats-io/jetstream";
import { pollUntil, startNatsCluster, startNatsServer } from "@zml/harness";
import type { NatsClusterHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { connectBus, natsConnectionOf, openKv, watchKvIntoMap } from "../src/index.ts";
import type { Bus, KvMap } from "../src/index.ts";

const Item = z.object({ n: z.number() });
const warnings: string[] = [];
const log = {
  info() {},
  warn: (_o: object, m?: string) => void warnings.push(m ?? ""),
  error() {},
};

// nats-server 2.9 places a watch's R1 consumer on any peer of the bucket's stream, a SIGKILLed
// one included, for minutes after the kill; about a third of consumer creates then time out.
describe("a KV bucket mirrored while one of three servers is down", { timeout: 120_000 }, () => {
  let cluster: NatsClusterHandle;
  let bus: Bus;
  beforeAll(async () => {
    cluster = await startNatsCluster({ env: { PATH: process.env.PATH } });
    bus = await connectBus({ ...cluster.client(), name: "kv-quorum", log });
  }, 60_000);
  afterAll(async () => {
    await bus?.drain();
    await cluster?.stop();
  });

  it("loads from the stream's leader at once, every time, and follows live updates once its watch lands on a live server", async () => {
    const kv = await openKv(bus, "quorum_load");
    for (let i = 0; i < 20; i++) await kv.put(`k${i}`, JSON.stringify({ n: i }));
    await kv.delete("k0");
    const jsm = await jetstreamManager(natsConnectionOf(bus));
    const leader = (await jsm.streams.info("KV_quorum_load")).cluster?.leader;
    // A follower dies, not the server this client uses: the stream keeps its leader and the
    // client its connection, so only the placement of consumers is in play.
    const ours = natsConnectionOf(bus).info?.server_name;
    const victim = cluster.servers.find((s) => s.name !== leader && s.name !== ours)!;
    await victim.kill();
    // The survivors agree on a JetStream meta leader (the victim may have been it).
    await cluster.waitHealthy();

    const started = Date.now();
    const mirrors: KvMap<z.infer<typeof Item>>[] = await Promise.all(
      Array.from({ length: 8 }, () => watchKvIntoMap(bus, kv, { schema: Item, log })),
    );
    // No load waited for a consumer create's 5 s timeout.
    expect(Date.now() - started).toBeLessThan(3_000);
    for (const m of mirrors) {
      expect(m.map.size).toBe(19);
      expect(m.map.has("k0")).toBe(false);
      expect(m.map.get("k7")).toEqual({ n: 7 });
    }

    // Written after the load: reaches every mirror, each once its watch exists. A create that
    // lands on the dead server costs its 5 s timeout and up to 2 s of pause, and about a third
    // do: 60 s covers eight in a row for one of the eight mirrors (30 s, four, failed once in
    // a loaded full run).
    await kv.put("late", JSON.stringify({ n: 99 }));
    await kv.delete("k1");
    await pollUntil(
      () => mirrors.every((m) => m.following() && m.map.get("late")?.n === 99 && !m.map.has("k1")),
      { timeoutMs: 60_000, message: "every mirror following, with the later writes" },
    );
    for (const m of mirrors) m.stop();

    // A bucket too big to read entry by entry loads through its watch: a create that lands on
    // the dead server is tried again within the load, which does not fail.
    const big = await Promise.all(
      Array.from({ length: 4 }, () =>
        watchKvIntoMap(bus, kv, { schema: Item, log, readMaxEntries: 0 }),
      ),
    );
    for (const m of big) {
      expect(m.map.get("late")).toEqual({ n: 99 });
      expect(m.map.size).toBe(19);
      m.stop();
    }
    await victim.start();
  });
});

describe("a KV bucket with an entry whose header block is forged, mirrored from scratch", () => {
  it("skips that entry as invalid and loads the others", async () => {
    await using nats = await startNatsServer({ security: "open" });
    const open = await connectBus({ ...nats.client(), name: "kv-forged", log, insecure: true });
    const raw = connectTcp({ host: "127.0.0.1", port: nats.port });
    try {
      raw.write('CONNECT {"verbose":false,"headers":true}\r\n');
      const kv = await openKv(open, "forged_load");
      await kv.put("good", JSON.stringify({ n: 1 }));
      const block = "NATS/1.0\r\nBad Name: v\r\n\r\n";
      const payload = JSON.stringify({ n: 2 });
      raw.write(
        `HPUB $KV.forged_load.bad ${block.length} ${block.length + payload.length}\r\n${block}${payload}\r\n`,
      );
      await kv.put("later", JSON.stringify({ n: 3 }));
      const jsm = await jetstreamManager(natsConnectionOf(open));
      await pollUntil(async () => (await jsm.streams.info("KV_forged_load")).state.messages === 3);
      warnings.length = 0;
      const mirror = await watchKvIntoMap(open, kv, { schema: Item, log });
      expect([...mirror.map.keys()].sort()).toEqual(["good", "later"]);
      expect(warnings).toContain("invalid kv entry");
      mirror.stop();
    } finally {
      raw.destroy();
      await open.drain();
    }
  });
});
