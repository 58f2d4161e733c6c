// Prefix placements between two replicas over a real nats-server: what one replica sends
// lands in the other's index, the byte budget holds, and malformed messages change nothing.
import { connectBus, natsConnectionOf, publishBytes } from "@zml/bus";
import type { Bus } from "@zml/bus";
import { dispatcherPlacementsSubject, NodeSpecSchema } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import { pollUntil, startNatsServer } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { promptPrefixOf } from "@zml/routing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlacementShare } from "../src/capacity/placement-share.ts";
import type { PlacementShare } from "../src/capacity/placement-share.ts";
import { createRoutingState } from "../src/fleet/routing-state.ts";
import type { RoutingState } from "../src/fleet/routing-state.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} } as never;
let nats: NatsServerHandle;
const buses: Bus[] = [];
const shares: PlacementShare[] = [];

beforeAll(async () => {
  nats = await startNatsServer();
});
afterAll(async () => {
  for (const s of shares) s.stop();
  for (const b of buses) await b.drain();
  await nats?.stop();
});

function routing(): RoutingState {
  const nodes = new Map(
    ["n1", "n2"].map((id) => [id, NodeSpecSchema.parse(nodeSpec(id, { models: ["m"] }))]),
  );
  return createRoutingState({
    nodes,
    models: new Map(),
    policies: new Map(),
    costs: new Map(),
    quality: new Map(),
    states: new Map(),
  });
}

async function replica(token: string, extra: { bytesPerSecond?: number } = {}) {
  const bus = await connectBus({ ...nats.client(), name: `replica-${token}`, log: quiet });
  buses.push(bus);
  const state = routing();
  const counts = { dropped: 0, sent_bytes: 0, received_bytes: 0 };
  const share = startPlacementShare({
    bus,
    routing: state,
    log: quiet,
    clock: Date.now,
    replica: `dispatcher@test/${token}`,
    replicaToken: token,
    counted: (event, amount) => (counts[event] += amount),
    ...extra,
  });
  shares.push(share);
  await bus.flush();
  return { bus, state, share, counts };
}

const tenant = (name: string) =>
  promptPrefixOf([{ role: "system", content: name.padEnd(4_000, ".") }])!;
const held = (state: RoutingState, nodeId: string, prefix = tenant("acme")) => {
  const { snapshot, live } = state.current();
  const blocks = live.prefixes.match(prefix.digests).blocks[snapshot.nodeIndex.get(nodeId)!]!;
  live.prefixes.clearMatch();
  return blocks;
};

describe("placement share", () => {
  it("puts one replica's placements in the other's index, coalesced into one message", async () => {
    const a = await replica("ra");
    const b = await replica("rb");
    a.share.placed("n2", tenant("acme"));
    a.share.placed("n1", tenant("globex"));
    await pollUntil(() => held(b.state, "n2") === 15, {
      timeoutMs: 5_000,
      message: "b to learn a's placement",
    });
    expect(held(b.state, "n1", tenant("globex"))).toBe(15);
    expect(held(b.state, "n1")).toBe(0);
    // The sender's own index is the route path's to fill, not its echo's.
    expect(held(a.state, "n2")).toBe(0);
    expect(b.counts.received_bytes).toBeGreaterThan(0);
    expect(b.counts.received_bytes).toBeLessThan(1_000);
  });

  it("drops what exceeds its byte budget, and counts it", async () => {
    const a = await replica("rc", { bytesPerSecond: 300 });
    const b = await replica("rd");
    for (let i = 0; i < 5; i++) a.share.placed("n1", tenant(`t${i}`));
    expect(a.counts.dropped).toBeGreaterThanOrEqual(3);
    expect(a.counts.sent_bytes).toBeLessThanOrEqual(300);
    await pollUntil(() => held(b.state, "n1", tenant("t0")) === 15, {
      timeoutMs: 5_000,
      message: "the first placement to arrive",
    });
    expect(held(b.state, "n1", tenant("t4"))).toBe(0);
  });

  it("ignores malformed placements and unknown nodes without harm", async () => {
    const b = await replica("re");
    const forged = await connectBus({ ...nats.client(), name: "forger", log: quiet });
    buses.push(forged);
    const subject = dispatcherPlacementsSubject("forger");
    for (const body of [
      "not json",
      '{"type":"dispatcher.placements.v1","replica":"x","placements":[]}',
      '{"type":"dispatcher.placements.v1","replica":"x","placements":[{"node":"n1","prefix":"12:!!"}]}',
      '{"type":"dispatcher.placements.v1","replica":"x","placements":[{"node":"ghost","prefix":"4000:AAAAAAAA"}]}',
      '{"type":"dispatcher.placements.v1","replica":"x","placements":[{"node":"n1","prefix":"10:AAAAAAAA"}]}',
    ]) {
      publishBytes(forged, subject, new TextEncoder().encode(body));
    }
    await natsConnectionOf(forged).flush();
    await pollUntil(() => b.counts.received_bytes > 300, {
      timeoutMs: 5_000,
      message: "the forged messages to arrive",
    });
    const { live } = b.state.current();
    expect(live.prefixes.sizeOf("n1").blocks).toBe(0);
    expect(live.prefixes.sizeOf("ghost").blocks).toBe(0);
  });
});
