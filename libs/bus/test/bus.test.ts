import { pollUntil } from "@zml/harness";
import { HEADERS, ZmlError } from "@zml/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  connectBus,
  createHeaders,
  createReplyMux,
  createReplyWriter,
  errorOfFrame,
  natsConnectionOf,
  openKv,
  publishJson,
  createAcceptAnnouncer,
  subscribeJson,
  watchKvIntoMap,
} from "../src/index.ts";
import type { RouteFrame } from "../src/index.ts";
import { startBusRig } from "../src/testing/index.ts";
import type { BusRig } from "../src/testing/index.ts";

const log = { info() {}, warn() {}, error() {} };
let rig: BusRig;
/** Raw NATS, to send what the typed helpers never would. */
const nc = () => natsConnectionOf(rig.bus);

beforeAll(async () => {
  rig = await startBusRig({ name: "bus-test" });
});
afterAll(() => rig?.stop());

const Item = z.object({ name: z.string(), n: z.number().int() });

describe("typed pub/sub", () => {
  it("delivers valid messages and drops invalid ones without crashing", async () => {
    const got: Array<z.infer<typeof Item>> = [];
    const sub = subscribeJson(rig.bus, "t.items", Item, (v) => void got.push(v), { log });
    nc().publish("t.items", "{not json");
    nc().publish("t.items", JSON.stringify({ name: "x", n: 1.5 }));
    publishJson(rig.bus, "t.items", Item, { name: "ok", n: 1 });
    await pollUntil(() => got.length === 1);
    await nc().flush();
    expect(got).toEqual([{ name: "ok", n: 1 }]);
    sub.unsubscribe();
  });

  it("refuses to publish a message that breaks its schema", () => {
    expect(() => publishJson(rig.bus, "t.items", Item, { name: "x", n: "1" } as never)).toThrow(
      /invalid message on t.items/,
    );
  });
});

describe("KV bucket watched into memory", () => {
  it("loads existing entries before resolving, then applies live puts and deletes", async () => {
    const kv = await openKv(rig.bus, "test_watch");
    await kv.put("a", JSON.stringify({ name: "a", n: 1 }));
    await kv.put("b", JSON.stringify({ name: "b", n: 2 }));
    await kv.put("bad", "{}");
    const watched = await watchKvIntoMap(rig.bus, kv, { schema: Item, log });
    expect([...watched.map.keys()].sort()).toEqual(["a", "b"]);

    await kv.put("c", JSON.stringify({ name: "c", n: 3 }));
    await kv.delete("a");
    await pollUntil(() => watched.map.has("c") && !watched.map.has("a"));
    await kv.put("b", "not json");
    await pollUntil(() => !watched.map.has("b"));
    watched.stop();
  });

  it("loads a bucket with more entries than it reads one by one through its watch", async () => {
    const kv = await openKv(rig.bus, "test_watch_big");
    for (let i = 0; i < 5; i++) await kv.put(`k${i}`, JSON.stringify({ name: `k${i}`, n: i }));
    await kv.delete("k0");
    const watched = await watchKvIntoMap(rig.bus, kv, { schema: Item, log, readMaxEntries: 2 });
    expect([...watched.map.keys()].sort()).toEqual(["k1", "k2", "k3", "k4"]);
    await kv.put("k5", JSON.stringify({ name: "k5", n: 5 }));
    await pollUntil(() => watched.map.has("k5"));
    expect(watched.following()).toBe(true);
    watched.stop();
  });

  it("resolves at once for an empty bucket", async () => {
    const watched = await watchKvIntoMap(rig.bus, await openKv(rig.bus, "test_empty"), {
      schema: Item,
      log,
    });
    expect(watched.map.size).toBe(0);
    watched.stop();
  });
});

describe("route reply frames", () => {
  it("carry a streamed reply in order to the right requester", async () => {
    const sub = nc().subscribe("t.route", {
      callback: (_err, msg) => {
        const w = createReplyWriter(rig.bus, msg.reply!);
        const name = msg.headers?.get("x-name") ?? "";
        w.head(200, "text/event-stream", `node="${name}"`);
        for (let i = 0; i < 20; i++) w.chunk(new TextEncoder().encode(`${name}${i};`));
        w.end();
      },
    });
    const mux = createReplyMux(rig.bus);
    const run = (name: string) =>
      new Promise<{ frames: RouteFrame[]; text: string }>((resolve) => {
        const frames: RouteFrame[] = [];
        const h = createHeaders();
        h.set("x-name", name);
        mux.request(
          "t.route",
          new Uint8Array(0),
          h,
          (f) => {
            frames.push(f);
            if (f.kind === "end" || f.kind === "error") {
              resolve({
                frames,
                text: frames.map((x) => new TextDecoder().decode(x.data)).join(""),
              });
            }
          },
          { idleTimeoutMs: 5_000 },
        );
      });
    const [a, b] = await Promise.all([run("a"), run("b")]);
    expect(a.frames[0]).toMatchObject({ kind: "head", status: 200, routing: 'node="a"' });
    expect(a.frames.at(-1)!.kind).toBe("end");
    expect(a.text).toBe(Array.from({ length: 20 }, (_, i) => `a${i};`).join(""));
    expect(b.text).toBe(Array.from({ length: 20 }, (_, i) => `b${i};`).join(""));
    expect(mux.pendingCount()).toBe(0);
    sub.unsubscribe();
    mux.close();
  });

  it("exposes the reply inbox the responder sees", async () => {
    const seen: string[] = [];
    const sub = nc().subscribe("t.inbox", {
      callback: (_err, msg) => {
        seen.push(msg.reply!);
        createReplyWriter(rig.bus, msg.reply!).end();
      },
    });
    const mux = createReplyMux(rig.bus);
    let inbox = "";
    await new Promise<RouteFrame>((resolve) => {
      inbox = mux.request("t.inbox", new Uint8Array(0), createHeaders(), resolve, {
        idleTimeoutMs: 5_000,
      }).inbox;
    });
    expect(seen).toEqual([inbox]);
    sub.unsubscribe();
    mux.close();
  });

  it("remembers which replica accepted a request and fails only that replica's requests", async () => {
    const accepted: string[] = [];
    // Two "replicas": each accepts, then stays silent (as one that died mid-request would).
    const announcers = ["replica-a", "replica-b"].map((replica) =>
      createAcceptAnnouncer(rig.bus, { replica, afterMs: 10 }),
    );
    const subs = ["t.replica-a", "t.replica-b"].map((subject, i) =>
      nc().subscribe(subject, {
        callback: (_err, msg) =>
          void announcers[i]!.track(msg.reply!, createReplyWriter(rig.bus, msg.reply!)),
      }),
    );
    const mux = createReplyMux(rig.bus, { onAccept: (r) => accepted.push(r) });
    const frames: Record<string, RouteFrame[]> = { a: [], b: [] };
    for (const [key, subject] of [
      ["a", "t.replica-a"],
      ["b", "t.replica-b"],
    ] as const) {
      mux.request(subject, new Uint8Array(0), createHeaders(), (f) => frames[key]!.push(f), {
        idleTimeoutMs: 30_000,
      });
    }
    await pollUntil(() => accepted.length === 2);
    expect(accepted.sort()).toEqual(["replica-a", "replica-b"]);
    // The accept frame is not an answer frame: nothing was delivered yet.
    expect(frames.a).toEqual([]);
    expect(
      mux.failServedBy("replica-a", new ZmlError("dispatcher_lost", "gone", { retryAfterS: 1 })),
    ).toBe(1);
    expect(frames.a).toHaveLength(1);
    expect(errorOfFrame(frames.a![0]!).code).toBe("dispatcher_lost");
    expect(frames.b).toEqual([]);
    expect(mux.pendingCount()).toBe(1);
    expect(mux.failServedBy("replica-a", new ZmlError("dispatcher_lost", "gone"))).toBe(0);
    for (const sub of subs) sub.unsubscribe();
    for (const a of announcers) a.stop();
    mux.close();
  });

  it("learns the serving replica from the first answer frame, with no accept message for a quick answer", async () => {
    const accepted: string[] = [];
    const accepts = createAcceptAnnouncer(rig.bus, { replica: "replica-q", afterMs: 60_000 });
    const kinds: string[] = [];
    const spy = nc().subscribe(`${rig.bus.inboxPrefix}.>`, {
      callback: (_err, msg) => void kinds.push(msg.headers?.get(HEADERS.replyKind) ?? "?"),
    });
    const sub = nc().subscribe("t.quick", {
      callback: (_err, msg) => {
        const w = createReplyWriter(rig.bus, msg.reply!, { replica: "replica-q" });
        const untrack = accepts.track(msg.reply!, w);
        w.head(200, "text/event-stream", "");
        untrack();
      },
    });
    const mux = createReplyMux(rig.bus, { onAccept: (r) => accepted.push(r) });
    const frames: RouteFrame[] = [];
    mux.request("t.quick", new Uint8Array(0), createHeaders(), (f) => frames.push(f), {
      idleTimeoutMs: 30_000,
    });
    await pollUntil(() => frames.length === 1);
    expect(accepted).toEqual(["replica-q"]);
    // The head frame alone told the mux who serves the stream: its loss ends the request.
    expect(
      mux.failServedBy("replica-q", new ZmlError("dispatcher_lost", "gone", { retryAfterS: 1 })),
    ).toBe(1);
    expect(errorOfFrame(frames[1]!).code).toBe("dispatcher_lost");
    await nc().flush();
    expect(kinds).toEqual(["head"]);
    spy.unsubscribe();
    sub.unsubscribe();
    accepts.stop();
    mux.close();
  });

  it("fails a request no replica accepted within the bound, and never an accepted one", async () => {
    // One subscriber swallows requests (as a message lost with a dying server would be);
    // the other accepts, then stays silent (a live replica's long answer).
    const swallow = nc().subscribe("t.swallow", { callback: () => {} });
    const accepts = createAcceptAnnouncer(rig.bus, { replica: "replica-a", afterMs: 10 });
    const accept = nc().subscribe("t.accepts", {
      callback: (_err, msg) =>
        void accepts.track(msg.reply!, createReplyWriter(rig.bus, msg.reply!)),
    });
    const accepted: string[] = [];
    const mux = createReplyMux(rig.bus, { onAccept: (r) => accepted.push(r) });
    const frames: Record<string, RouteFrame[]> = { lost: [], taken: [] };
    for (const [key, subject] of [
      ["lost", "t.swallow"],
      ["taken", "t.accepts"],
    ] as const) {
      mux.request(subject, new Uint8Array(0), createHeaders(), (f) => frames[key]!.push(f), {
        idleTimeoutMs: 30_000,
      });
    }
    await pollUntil(() => accepted.length === 1);
    const lost = new ZmlError("dispatcher_lost", "never accepted", { retryAfterS: 1 });
    // Within the bound nothing is failed, accepted or not.
    expect(mux.failUnaccepted(60_000, lost)).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(mux.failUnaccepted(20, lost)).toBe(1);
    expect(frames.lost!.map((f) => errorOfFrame(f).code)).toEqual(["dispatcher_lost"]);
    expect(frames.taken).toEqual([]);
    expect(mux.pendingCount()).toBe(1);
    swallow.unsubscribe();
    accept.unsubscribe();
    accepts.stop();
    mux.close();
  });

  it("ends with an error frame when nobody serves the subject", async () => {
    const mux = createReplyMux(rig.bus);
    const frame = await new Promise<RouteFrame>((resolve) =>
      mux.request("t.nobody", new Uint8Array(0), createHeaders(), resolve, {
        idleTimeoutMs: 5_000,
      }),
    );
    expect(frame.kind).toBe("error");
    expect(errorOfFrame(frame).code).toBe("bus_unavailable");
    mux.close();
  });

  it("ends with gateway_timeout when the responder goes silent", async () => {
    const sub = nc().subscribe("t.silent", { callback: () => {} });
    const mux = createReplyMux(rig.bus);
    const frame = await new Promise<RouteFrame>((resolve) =>
      mux.request("t.silent", new Uint8Array(0), createHeaders(), resolve, { idleTimeoutMs: 200 }),
    );
    expect(errorOfFrame(frame).code).toBe("gateway_timeout");
    sub.unsubscribe();
    mux.close();
  });

  it("detects a lost frame as an interrupted stream", async () => {
    const sub = nc().subscribe("t.gap", {
      callback: (_err, msg) => {
        const h = createHeaders();
        h.set(HEADERS.replyKind, "chunk");
        h.set(HEADERS.seq, "1"); // frame 0 never sent
        nc().publish(msg.reply!, new Uint8Array(0), { headers: h });
      },
    });
    const mux = createReplyMux(rig.bus);
    const frame = await new Promise<RouteFrame>((resolve) =>
      mux.request("t.gap", new Uint8Array(0), createHeaders(), resolve, { idleTimeoutMs: 5_000 }),
    );
    expect(errorOfFrame(frame).code).toBe("stream_interrupted");
    sub.unsubscribe();
    mux.close();
  });

  it("fails every pending request at once on failAll", async () => {
    const sub = nc().subscribe("t.hold", { callback: () => {} });
    const mux = createReplyMux(rig.bus);
    const frames = Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<RouteFrame>((resolve) =>
            mux.request("t.hold", new Uint8Array(0), createHeaders(), resolve, {
              idleTimeoutMs: 60_000,
            }),
          ),
      ),
    );
    await nc().flush();
    mux.failAll(new ZmlError("bus_unavailable", "lost"));
    expect((await frames).map((f) => errorOfFrame(f).code)).toEqual(
      Array(3).fill("bus_unavailable"),
    );
    sub.unsubscribe();
    mux.close();
  });
});

describe("connection state", () => {
  it("reports a disconnect and the reconnect after a server restart", async () => {
    const changes: boolean[] = [];
    const own = await connectBus({ ...rig.nats.client(), name: "restart-test", log });
    own.onConnectionChange((c) => changes.push(c));
    await rig.nats.restart();
    await pollUntil(() => changes.includes(false) && own.isConnected(), { timeoutMs: 20_000 });
    expect(changes[0]).toBe(false);
    await own.drain();
  });
});
