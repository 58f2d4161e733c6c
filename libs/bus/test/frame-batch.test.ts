import { pollUntil } from "@zml/harness";
import { HEADERS, REPLY_BATCH, ZmlError } from "@zml/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createAcceptAnnouncer,
  createHeaders,
  createReplyMux,
  createReplyWriter,
  errorOfFrame,
  natsConnectionOf,
} from "../src/index.ts";
import type { BusReplyWriter, Msg, RouteFrame } from "../src/index.ts";
import { decodeFrameBatch, encodeFrameBatch, encodeMeta } from "../src/frame-batch.ts";
import type { OutgoingFrame } from "../src/frame-batch.ts";
import { siblingBatchSubject } from "../src/route-reply.ts";
import { turnPublisherOf } from "../src/turn-publisher.ts";
import { startBusRig } from "../src/testing/index.ts";
import type { BusRig } from "../src/testing/index.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
let rig: BusRig;
const nc = () => natsConnectionOf(rig.bus);

beforeAll(async () => {
  rig = await startBusRig({ name: "frame-batch-test" });
});
afterAll(() => rig?.stop());

const outgoing = (
  id: string,
  kind: OutgoingFrame["kind"],
  seq: number,
  text = "",
): OutgoingFrame => {
  const data = encoder.encode(text);
  return {
    id,
    kind,
    seq,
    headers: [],
    meta: new Uint8Array(0),
    pieces: [data],
    bytes: data.byteLength,
  };
};

describe("frame batch codec", () => {
  it("reads back every frame, its meta, its pieces joined, and its sequence", () => {
    const head = outgoing("a", "head", 0);
    head.meta = encodeMeta([
      [HEADERS.status, "200"],
      [HEADERS.routing, 'node="n", tier=1'],
    ]);
    const chunk: OutgoingFrame = {
      id: "a",
      kind: "chunk",
      seq: 1,
      headers: [],
      meta: new Uint8Array(0),
      pieces: [encoder.encode("data: 1\n\n"), encoder.encode("data: 2\n\n")],
      bytes: 18,
    };
    const decoded = decodeFrameBatch(
      encodeFrameBatch([head, outgoing("b", "accept", 0), chunk, outgoing("b", "error", 4, "{}")]),
    );
    if (!decoded.ok) throw new Error(decoded.error);
    expect(decoded.frames.map((f) => [f.id, f.kind, f.seq])).toEqual([
      ["a", "head", 0],
      ["b", "accept", -1],
      ["a", "chunk", 1],
      ["b", "error", 4],
    ]);
    expect(decoded.frames[0]!.meta.get(HEADERS.routing)).toBe('node="n", tier=1');
    expect(decoder.decode(decoded.frames[2]!.data)).toBe("data: 1\n\ndata: 2\n\n");
  });

  it("reads back ids of every length a batch allows", () => {
    const ids = Array.from({ length: 255 }, (_, i) => "z0-9a.".repeat(43).slice(0, i + 1));
    const decoded = decodeFrameBatch(encodeFrameBatch(ids.map((id) => outgoing(id, "end", 1))));
    if (!decoded.ok) throw new Error(decoded.error);
    expect(decoded.frames.map((f) => f.id)).toEqual(ids);
  });

  it("names every stream of a batch whose bodies do not add up, and those it read of a cut table", () => {
    const whole = encodeFrameBatch([
      outgoing("a", "chunk", 3, "xyz"),
      outgoing("b", "chunk", 1, "q"),
    ]);
    const short = decodeFrameBatch(whole.subarray(0, whole.length - 1));
    expect(short).toMatchObject({ ok: false, ids: ["a", "b"], complete: true });
    // The table itself cut after the first entry: only that stream is known.
    const cut = decodeFrameBatch(whole.subarray(0, 3 + 12 + 1 + 2));
    expect(cut).toMatchObject({ ok: false, ids: ["a"], complete: false });
    const version = Uint8Array.from(whole);
    version[0] = 9;
    expect(decodeFrameBatch(version)).toMatchObject({ ok: false, ids: [] });
    expect(decodeFrameBatch(new Uint8Array(1))).toMatchObject({ ok: false });
  });

  it("takes a batch subject only beside the reply inbox", () => {
    const token = REPLY_BATCH.token;
    expect(siblingBatchSubject("_INBOX.x.y.12", `_INBOX.x.y.${token}`)).toBe(`_INBOX.x.y.${token}`);
    expect(siblingBatchSubject("_INBOX.x.y.12", `_INBOX.x.z.${token}`)).toBeUndefined();
    expect(siblingBatchSubject("_INBOX.x.y.12", "route.request")).toBeUndefined();
    expect(siblingBatchSubject("_INBOX.x.y.12", undefined)).toBeUndefined();
  });
});

/** Collects every message on this bus's inboxes: what crossed the wire, in order. */
function spyOnInboxes(): { messages: Msg[]; stop(): void } {
  const messages: Msg[] = [];
  const sub = nc().subscribe(`${rig.bus.inboxPrefix}.>`, {
    callback: (_e, m) => void messages.push(m),
  });
  return { messages, stop: () => sub.unsubscribe() };
}

interface Served {
  writer: BusReplyWriter;
  reply: string;
}

/** A responder that keeps each request's writer (batched as the request asks) for the test to drive. */
function holdRequests(subject: string): { served: Served[]; stop(): void } {
  const served: Served[] = [];
  const sub = nc().subscribe(subject, {
    callback: (_e, msg) => {
      const batchSubject = msg.headers?.get(HEADERS.replyBatch) || undefined;
      served.push({
        reply: msg.reply!,
        writer: createReplyWriter(rig.bus, msg.reply!, {
          replica: "replica-1",
          ...(batchSubject ? { batchSubject } : {}),
        }),
      });
    },
  });
  return { served, stop: () => sub.unsubscribe() };
}

function collect(
  mux: ReturnType<typeof createReplyMux>,
  subject: string,
  n: number,
): Array<{ frames: RouteFrame[]; text(): string; ended(): boolean }> {
  return Array.from({ length: n }, () => {
    const frames: RouteFrame[] = [];
    mux.request(subject, new Uint8Array(0), createHeaders(), (f) => frames.push(f), {
      idleTimeoutMs: 30_000,
    });
    return {
      frames,
      text: () => frames.map((f) => decoder.decode(f.data)).join(""),
      ended: () => ["end", "error", "full"].includes(frames.at(-1)?.kind ?? ""),
    };
  });
}

describe("frame batches over the bus", () => {
  it("sends one message a turn for every stream of one requester, each stream in order", async () => {
    const held = holdRequests("t.batch.many");
    const mux = createReplyMux(rig.bus);
    const streams = collect(mux, "t.batch.many", 8);
    await pollUntil(() => held.served.length === 8);
    const spy = spyOnInboxes();
    await nc().flush();
    // One turn: every stream's head and a first event.
    for (const [i, s] of held.served.entries()) {
      s.writer.head(200, "text/event-stream", `node="n${i}"`);
      s.writer.chunk(encoder.encode(`data: ${i}-0\n\n`));
    }
    await pollUntil(() => streams.every((s) => s.frames.length === 2));
    expect(spy.messages).toHaveLength(1);
    expect(spy.messages[0]!.subject.endsWith(`.${REPLY_BATCH.token}`)).toBe(true);
    expect(spy.messages[0]!.headers?.get(HEADERS.type)).toBe(REPLY_BATCH.type);
    // Next turn: two events of each stream, then the end; the two events become one frame.
    for (const [i, s] of held.served.entries()) {
      s.writer.chunk(encoder.encode(`data: ${i}-1\n\n`));
      s.writer.chunk(encoder.encode(`data: ${i}-2\n\n`));
      s.writer.end();
    }
    await pollUntil(() => streams.every((s) => s.ended()));
    expect(spy.messages).toHaveLength(2);
    for (const [i, s] of streams.entries()) {
      expect(s.frames.map((f) => f.kind)).toEqual(["head", "chunk", "chunk", "end"]);
      expect(s.frames[0]).toMatchObject({ status: 200, routing: `node="n${i}"` });
      expect(s.text()).toBe(`data: ${i}-0\n\ndata: ${i}-1\n\ndata: ${i}-2\n\n`);
    }
    expect(mux.pendingCount()).toBe(0);
    spy.stop();
    held.stop();
    mux.close();
  });

  it("ends only the stream whose error frame shares a batch with other streams' chunks", async () => {
    const held = holdRequests("t.batch.error");
    const mux = createReplyMux(rig.bus);
    const streams = collect(mux, "t.batch.error", 3);
    await pollUntil(() => held.served.length === 3);
    for (const s of held.served) s.writer.head(200, "text/event-stream", "");
    await pollUntil(() => streams.every((s) => s.frames.length === 1));
    const spy = spyOnInboxes();
    await nc().flush();
    // One turn: a chunk of the first, the second breaks, a chunk of the third.
    held.served[0]!.writer.chunk(encoder.encode("data: a\n\n"));
    held.served[1]!.writer.error(new ZmlError("stream_interrupted", "node went away").toBody());
    held.served[2]!.writer.chunk(encoder.encode("data: c\n\n"));
    await pollUntil(() => streams[1]!.ended() && streams[2]!.frames.length === 2);
    expect(spy.messages).toHaveLength(1);
    expect(streams[1]!.frames.map((f) => f.kind)).toEqual(["head", "error"]);
    expect(errorOfFrame(streams[1]!.frames[1]!).code).toBe("stream_interrupted");
    for (const i of [0, 2]) {
      held.served[i]!.writer.end();
    }
    await pollUntil(() => streams[0]!.ended() && streams[2]!.ended());
    expect(streams[0]!.text()).toBe("data: a\n\n");
    expect(streams[2]!.text()).toBe("data: c\n\n");
    expect(streams[0]!.frames.at(-1)!.kind).toBe("end");
    spy.stop();
    held.stop();
    mux.close();
  });

  it("keeps a stream whose frames keep coming past its idle limit, and ends it once they stop", async () => {
    const held = holdRequests("t.batch.idle");
    const mux = createReplyMux(rig.bus);
    const streams = Array.from({ length: 2 }, () => {
      const frames: RouteFrame[] = [];
      mux.request("t.batch.idle", new Uint8Array(0), createHeaders(), (f) => frames.push(f), {
        idleTimeoutMs: 300,
      });
      return frames;
    });
    await pollUntil(() => held.served.length === 2);
    for (const s of held.served) s.writer.head(200, "text/event-stream", "");
    // A chunk to each stream every 100 ms for 900 ms: three times the idle limit in all.
    for (let i = 0; i < 9; i++) {
      for (const s of held.served) s.writer.chunk(encoder.encode(`data: ${i}\n\n`));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(streams.map((f) => f.map((x) => x.kind).includes("error"))).toEqual([false, false]);
    const silentFrom = Date.now();
    await pollUntil(() => streams.every((f) => f.at(-1)?.kind === "error"));
    expect(Date.now() - silentFrom).toBeGreaterThanOrEqual(150);
    for (const f of streams) {
      expect(f.filter((x) => x.kind === "chunk")).toHaveLength(9);
      expect(errorOfFrame(f.at(-1)!).code).toBe("gateway_timeout");
    }
    expect(mux.pendingCount()).toBe(0);
    held.stop();
    mux.close();
  });

  it("keeps a frame batched after a message published alone behind that message", async () => {
    const held = holdRequests("t.batch.order");
    const mux = createReplyMux(rig.bus);
    const [s] = collect(mux, "t.batch.order", 1);
    await pollUntil(() => held.served.length === 1);
    const reply = held.served[0]!.reply;
    const batchSubject = reply.replace(/[^.]+$/, REPLY_BATCH.token);
    const id = reply.slice(reply.lastIndexOf(".") + 1);
    const publisher = turnPublisherOf(nc());
    // One turn: frame 0 batched, frame 1 alone, frame 2 batched. Were frame 2 to join the
    // first batch, it would overtake frame 1 and the stream would break on the gap.
    publisher.frame(batchSubject, outgoing(id, "head", 0));
    const h = createHeaders();
    h.set(HEADERS.replyKind, "chunk");
    h.set(HEADERS.seq, "1");
    publisher.publish(reply, encoder.encode("data: 1\n\n"), { headers: h });
    publisher.frame(batchSubject, outgoing(id, "end", 2));
    await pollUntil(() => s!.ended());
    expect(s!.frames.map((f) => f.kind)).toEqual(["head", "chunk", "end"]);
    held.stop();
    mux.close();
  });

  it("carries accept to a requester that takes batches, naming the replica", async () => {
    const held = holdRequests("t.batch.accept");
    const accepted: string[] = [];
    const mux = createReplyMux(rig.bus, { onAccept: (r) => accepted.push(r) });
    const [s] = collect(mux, "t.batch.accept", 1);
    await pollUntil(() => held.served.length === 1);
    const announcer = createAcceptAnnouncer(rig.bus, { replica: "replica-7", afterMs: 5 });
    announcer.track(held.served[0]!.reply, held.served[0]!.writer);
    await pollUntil(() => accepted.length === 1);
    expect(accepted).toEqual(["replica-7"]);
    expect(s!.frames).toEqual([]);
    expect(mux.failServedBy("replica-7", new ZmlError("dispatcher_lost", "gone"))).toBe(1);
    announcer.stop();
    held.stop();
    mux.close();
  });

  it("ends each stream an unreadable batch names with an error, and leaves the others running", async () => {
    const held = holdRequests("t.batch.broken");
    const mux = createReplyMux(rig.bus);
    const streams = collect(mux, "t.batch.broken", 3);
    await pollUntil(() => held.served.length === 3);
    for (const s of held.served) s.writer.head(200, "text/event-stream", "");
    await pollUntil(() => streams.every((s) => s.frames.length === 1));
    // A batch naming the first two streams whose bodies do not add up.
    const id = (reply: string) => reply.slice(reply.lastIndexOf(".") + 1);
    const bad = encodeFrameBatch([
      outgoing(id(held.served[0]!.reply), "chunk", 1, "data: x\n\n"),
      outgoing(id(held.served[1]!.reply), "chunk", 1, "data: y\n\n"),
    ]);
    const h = createHeaders();
    h.set(HEADERS.replyKind, REPLY_BATCH.kind);
    const batchSubject = held.served[0]!.reply.replace(/[^.]+$/, REPLY_BATCH.token);
    nc().publish(batchSubject, bad.subarray(0, bad.length - 2), { headers: h });
    await pollUntil(() => streams[0]!.ended() && streams[1]!.ended());
    for (const s of streams.slice(0, 2)) {
      expect(s.frames.map((f) => f.kind)).toEqual(["head", "error"]);
      expect(errorOfFrame(s.frames[1]!).code).toBe("stream_interrupted");
    }
    // The third stream was not in it and carries on.
    held.served[2]!.writer.chunk(encoder.encode("data: z\n\n"));
    held.served[2]!.writer.end();
    await pollUntil(() => streams[2]!.ended());
    expect(streams[2]!.frames.map((f) => f.kind)).toEqual(["head", "chunk", "end"]);
    held.stop();
    mux.close();
  });

  it("sends the one frame of a turn alone, as it would go without batches", async () => {
    const held = holdRequests("t.batch.lone");
    const mux = createReplyMux(rig.bus);
    const [s] = collect(mux, "t.batch.lone", 1);
    await pollUntil(() => held.served.length === 1);
    const spy = spyOnInboxes();
    await nc().flush();
    const w = held.served[0]!.writer;
    w.full(200, "application/json", 'node="n"', encoder.encode("{}"));
    await pollUntil(() => s!.ended());
    expect(spy.messages.map((m) => m.subject)).toEqual([held.served[0]!.reply]);
    expect(spy.messages[0]!.headers?.get(HEADERS.replyKind)).toBe("full");
    expect(s!.frames[0]).toMatchObject({ kind: "full", status: 200, routing: 'node="n"' });
    spy.stop();
    held.stop();
    mux.close();
  });

  it("sends frames alone to a requester that names no batch subject", async () => {
    const sub = nc().subscribe("t.batch.none", {
      callback: (_e, msg) => {
        const w = createReplyWriter(rig.bus, msg.reply!, { batchSubject: undefined });
        w.head(200, "text/event-stream", "");
        w.chunk(encoder.encode("data: 1\n\n"));
        w.end();
      },
    });
    const spy = spyOnInboxes();
    nc().publish("t.batch.none", new Uint8Array(0), { reply: `${rig.bus.inboxPrefix}.plain.1` });
    await pollUntil(() => spy.messages.length === 3);
    expect(spy.messages.map((m) => m.headers?.get(HEADERS.replyKind))).toEqual([
      "head",
      "chunk",
      "end",
    ]);
    spy.stop();
    sub.unsubscribe();
  });
});
