import { startNatsServer, pollUntil } from "@zml/harness";
import type { NatsServerHandle } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectBus, natsConnectionOf } from "../src/index.ts";
import type { NatsConnection } from "../src/index.ts";
import { turnPublisherOf } from "../src/turn-publisher.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
let nats: NatsServerHandle;
let nc: NatsConnection;
const log = { info() {}, warn() {}, error() {} };
const connectRaw = async (name: string) =>
  natsConnectionOf(await connectBus({ ...nats.client(), name, log }));

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectRaw("turn-test");
});
afterAll(async () => {
  if (!nc.isClosed()) await nc.close();
  await nats?.stop();
});

describe("turn publisher", () => {
  it("sends nothing before the turn ends, then everything in the order it was queued", async () => {
    const got: string[] = [];
    const sub = nc.subscribe("t.turn.>", {
      callback: (_e, m) => void got.push(decoder.decode(m.data)),
    });
    await nc.flush();
    const publisher = turnPublisherOf(nc);
    expect(turnPublisherOf(nc)).toBe(publisher); // one order per connection
    const sent = ["request", "frame 0", "frame 1", "cancel"];
    for (const [i, text] of sent.entries())
      publisher.publish(`t.turn.${i % 2}`, encoder.encode(text), {});
    // Still this turn: the client has not been handed a single message.
    expect(nc.stats().outMsgs).toBe(0);
    await pollUntil(() => got.length === sent.length);
    expect(got).toEqual(sent);
    sub.unsubscribe();
  });

  it("hands what is queued to the client at once on flushNow, and reports a refused publish", async () => {
    const other = await connectRaw("turn-test-closing");
    const publisher = turnPublisherOf(other);
    publisher.publish("t.flush", encoder.encode("x"), {});
    publisher.flushNow();
    expect(other.stats().outMsgs).toBe(1);
    await other.close();
    const failures: unknown[] = [];
    publisher.publish("t.flush", encoder.encode("late"), {}, (err) => failures.push(err));
    await pollUntil(() => failures.length === 1);
    expect(String(failures[0])).toMatch(/closed/i);
  });
});
