import { connect as connectTcp } from "node:net";
import { headers as clientHeaders, Match, MsgHdrsImpl } from "@nats-io/nats-core";
import type { Msg } from "@nats-io/nats-core";
import { pollUntil, startNatsServer } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { decodeHeaderBlock, decodeHeadersOf, isFastHeaders } from "../src/fast-headers.ts";
import {
  connectBus,
  createHeaders,
  headerOf,
  natsConnectionOf,
  openKv,
  subscribeMessages,
  watchKvIntoMap,
} from "../src/index.ts";

// The same operations on the client's headers and on ours must leave the same headers.
function both(apply: (h: ReturnType<typeof createHeaders>) => void) {
  const ours = createHeaders();
  const theirs = clientHeaders();
  apply(ours);
  apply(theirs);
  return { ours, theirs };
}

describe("createHeaders", () => {
  it("sets, appends, reads, deletes and encodes exactly as the client's headers do", () => {
    const { ours, theirs } = both((h) => {
      h.set("Zml-Model", "  llama-3 ");
      h.set("Zml-Model", "llama-3b");
      h.append("Zml-Fallback", "a");
      h.append("Zml-Fallback", "b");
      h.set("zml-tier", "2");
      h.set("Drop-Me", "x");
      h.delete("Drop-Me");
    });
    expect(new TextDecoder().decode((ours as MsgHdrsImpl).encode())).toBe(
      new TextDecoder().decode((theirs as MsgHdrsImpl).encode()),
    );
    for (const name of ["Zml-Model", "Zml-Fallback", "zml-tier", "Zml-Tier", "Drop-Me", "none"]) {
      expect(ours.get(name)).toBe(theirs.get(name));
      expect(ours.has(name)).toBe(theirs.has(name));
      expect(ours.values(name)).toEqual(theirs.values(name));
    }
    expect(ours.get("ZML-TIER", Match.IgnoreCase)).toBe("2");
    expect(ours.keys()).toEqual(theirs.keys());
  });

  it("refuses bad names and values with the client's errors", () => {
    expect(() => createHeaders().set("bad:name", "v")).toThrow(/not a valid character/);
    expect(() => createHeaders().set("Ok", "two\r\nlines")).toThrow(/cannot contain/);
    expect(() => clientHeaders().set("Ok", "two\r\nlines")).toThrow(/cannot contain/);
  });
});

describe("headerOf", () => {
  it("reads decoded wire headers like get, and is empty for absent ones", () => {
    const sent = createHeaders();
    sent.set("Zml-Seq", "3");
    sent.append("Zml-Kind", "chunk");
    sent.append("Zml-Kind", "second");
    const received = MsgHdrsImpl.decode((sent as MsgHdrsImpl).encode());
    expect(headerOf(received, "Zml-Seq")).toBe("3");
    expect(headerOf(received, "Zml-Kind")).toBe(received.get("Zml-Kind"));
    expect(headerOf(received, "zml-seq")).toBe(received.get("zml-seq"));
    expect(headerOf(received, "Absent")).toBe("");
    expect(headerOf(undefined, "Zml-Seq")).toBe("");
  });
});

const view = (h: ReturnType<typeof createHeaders>) =>
  h.keys().map((k) => [k, h.values(k), h.get(k)]);

describe("decodeHeaderBlock", () => {
  const encoder = new TextEncoder();

  it("decodes every block to the same headers as the client's decoder", () => {
    const blocks = [
      "NATS/1.0\r\nZml-Kind: full\r\nZml-Seq: 0\r\n\r\n",
      "NATS/1.0\r\nZml-Kind:chunk\r\nzml-kind:  second \r\nZml-Kind: third\r\n\r\n",
      "NATS/1.0\r\nNo-Colon-Line\r\n\r\nA: b: c\r\nEmpty:\r\n\r\n",
      "NATS/1.0\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
      "NATS/1.0\r\nUnterminated: yes",
      "NATS/1.0\r\n\r\n",
      "NATS/1.0",
      "NATS/1.0 503\r\n\r\n",
      "NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n",
      "NATS/1.0\r\nUtf8: h\u00e9llo \u2603\r\n\r\n",
    ];
    for (const block of blocks) {
      const bytes = encoder.encode(block);
      const ours = decodeHeaderBlock(bytes);
      const theirs = MsgHdrsImpl.decode(bytes);
      expect(view(ours), block).toEqual(view(theirs));
      expect([ours.hasError, ours.code, ours.description], block).toEqual([
        theirs.hasError,
        theirs.code,
        theirs.description,
      ]);
    }
    // Exact-name reads of a decoded block are Map lookups, as on headers built here.
    const decoded = decodeHeaderBlock(encoder.encode(blocks[1]));
    expect(headerOf(decoded, "Zml-Kind")).toBe("chunk");
    expect(headerOf(decoded, "zml-kind")).toBe("second");
  });

  it("refuses a bad header name or value as the client's decoder does", () => {
    for (const block of ["NATS/1.0\r\nBad Name: v\r\n\r\n", "NATS/1.0\r\nLone: a\rb\r\n\r\n"]) {
      const bytes = encoder.encode(block);
      expect(() => MsgHdrsImpl.decode(bytes), block).toThrow();
      expect(() => decodeHeaderBlock(bytes), block).toThrow();
    }
  });
});

describe("decodeHeadersOf", () => {
  let stop: (() => Promise<void>) | undefined;
  afterAll(async () => stop?.());

  it("decodes a message received from nats-server once, and msg.headers returns that decoding", async () => {
    const nats = await startNatsServer();
    const log = { info() {}, warn() {}, error() {} };
    const nc = natsConnectionOf(await connectBus({ ...nats.client(), name: "hdr-test", log }));
    stop = async () => {
      await nc.close();
      await nats.stop();
    };
    const received = new Promise<Msg>((resolve) => {
      nc.subscribe("t.hdr", { max: 1, callback: (_e, m) => resolve(m) });
    });
    await nc.flush();
    const sent = createHeaders();
    sent.set("Zml-Kind", "full");
    sent.append("Zml-Seq", "7");
    nc.publish("t.hdr", new TextEncoder().encode("body"), { headers: sent });
    const msg = await received;
    decodeHeadersOf(msg);
    const first = msg.headers;
    // The fast path was taken: a client release that stores messages differently fails here.
    expect(isFastHeaders(first)).toBe(true);
    expect(isFastHeaders(createHeaders())).toBe(true);
    expect(msg.headers).toBe(first); // decoded once, kept by the message
    expect(headerOf(first, "Zml-Kind")).toBe("full");
    expect(first?.get("Zml-Seq")).toBe("7");
    expect(new TextDecoder().decode(msg.data)).toBe("body");
    decodeHeadersOf(msg); // a second call keeps the first decoding
    expect(msg.headers).toBe(first);
    expect(view(first!)).toEqual(view(MsgHdrsImpl.decode((sent as MsgHdrsImpl).encode())));
  });
});

describe("a received message whose headers the NATS client would refuse", () => {
  // An open server: forged messages are written on a raw socket, bypassing any client.
  let nats: Awaited<ReturnType<typeof startNatsServer>>;
  let bus: Awaited<ReturnType<typeof connectBus>>;
  let raw: ReturnType<typeof connectTcp>;
  const logged: string[] = [];
  const log = {
    info() {},
    warn: (_o: unknown, m: string) => void logged.push(m),
    error: (_o: unknown, m: string) => void logged.push(m),
  };
  const forged = "NATS/1.0\r\nBad Name: v\r\n\r\n";
  const publishRaw = (subject: string, block: string, payload = "") =>
    raw.write(
      `HPUB ${subject} ${block.length} ${block.length + payload.length}\r\n${block}${payload}\r\n`,
    );

  beforeAll(async () => {
    nats = await startNatsServer({ security: "open" });
    bus = await connectBus({ ...nats.client(), name: "hdr-forged", log, insecure: true });
    raw = connectTcp({ host: "127.0.0.1", port: nats.port });
    raw.write('CONNECT {"verbose":false,"headers":true}\r\n');
  });
  afterAll(async () => {
    raw?.destroy();
    await bus?.drain();
    await nats?.stop();
  });

  it("is logged and dropped by a raw subscriber, which keeps serving the next message", async () => {
    const handled: string[] = [];
    subscribeMessages(bus, "t.forged", (msg) => void handled.push(msg.headers?.get("Ok") ?? ""), {
      log,
    });
    await natsConnectionOf(bus).flush();
    publishRaw("t.forged", forged);
    publishRaw("t.forged", "NATS/1.0\r\nOk: yes\r\n\r\n");
    await pollUntil(() => handled.length === 1);
    expect(handled).toEqual(["yes"]);
    expect(logged.filter((m) => m === "message with bad headers")).toHaveLength(1);
  });

  it("in a KV bucket, is an invalid entry to a watcher, which keeps applying updates", async () => {
    const kv = await openKv(bus, "forged");
    await kv.put("good", JSON.stringify({ n: 1 }));
    const watched = await watchKvIntoMap(bus, kv, { schema: z.object({ n: z.number() }), log });
    publishRaw("$KV.forged.bad", forged, JSON.stringify({ n: 2 }));
    await kv.put("later", JSON.stringify({ n: 3 }));
    await pollUntil(() => watched.map.has("later"));
    expect([...watched.map.keys()].sort()).toEqual(["good", "later"]);
    expect(logged).toContain("invalid kv entry");
    watched.stop();
  });
});
