import { createHeaders } from "@zml/bus";
import { HEADERS, MESSAGE_TYPES, ZmlError } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createCapacitySignal } from "../src/capacity/capacity-signal.ts";
import { parseRetryAfter } from "../src/node/node-call.ts";
import { createCancellations } from "../src/route/cancellations.ts";
import { withModel } from "../src/route/model-rewrite.ts";
import { readRouteHeaders } from "../src/route/route-headers.ts";

describe("capacity signal", () => {
  it("wakes every waiter on notify", async () => {
    const signal = createCapacitySignal();
    const waits = [signal.wait(60_000), signal.wait(60_000)];
    expect(signal.waiting()).toBe(2);
    signal.notify();
    expect(await Promise.all(waits)).toEqual([true, true]);
    expect(signal.waiting()).toBe(0);
  });

  it("gives up at the timeout or on abort", async () => {
    const signal = createCapacitySignal();
    expect(await signal.wait(5)).toBe(false);
    const abort = new AbortController();
    const waiting = signal.wait(60_000, abort.signal);
    abort.abort();
    expect(await waiting).toBe(false);
    expect(await signal.wait(0)).toBe(false);
    expect(signal.waiting()).toBe(0);
  });
});

describe("cancellations", () => {
  it("aborts only the registered request, once", () => {
    const c = createCancellations();
    const signal = c.register("_INBOX.a.1");
    expect(c.cancel("_INBOX.other")).toBe(false);
    expect(c.cancel("_INBOX.a.1")).toBe(true);
    expect(signal.aborted).toBe(true);
    expect(c.cancel("_INBOX.a.1")).toBe(false);
    c.register("_INBOX.a.2");
    c.release("_INBOX.a.2");
    expect(c.size()).toBe(0);
  });
});

describe("Retry-After", () => {
  it("reads delta-seconds and HTTP dates", () => {
    const now = Date.parse("2026-11-30T12:00:00Z");
    expect(parseRetryAfter("7", now)).toBe(7);
    expect(parseRetryAfter("Mon, 30 Nov 2026 12:00:30 GMT", now)).toBe(30);
    expect(parseRetryAfter("Mon, 30 Nov 2026 11:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter(undefined, now)).toBeNull();
    expect(parseRetryAfter("soon", now)).toBeNull();
  });
});

describe("fallback body", () => {
  it("changes only the model", () => {
    const body = Buffer.from(
      '{"model":"a","messages":[{"role":"user","content":"x"}],"temperature":0.5,"models":["b"]}',
    );
    expect(JSON.parse(Buffer.from(withModel(body, "b")).toString())).toEqual({
      model: "b",
      messages: [{ role: "user", content: "x" }],
      temperature: 0.5,
      models: ["b"],
    });
  });
});

describe("route request headers", () => {
  const headers = (set: Record<string, string>) => {
    const h = createHeaders();
    h.set(HEADERS.type, MESSAGE_TYPES.routeRequestV1);
    h.set(HEADERS.model, "m");
    h.set(HEADERS.path, "/v1/chat/completions");
    for (const [k, v] of Object.entries(set)) h.set(k, v);
    return h;
  };

  it("reads the routing fields intake extracted", () => {
    const r = readRouteHeaders(
      headers({
        [HEADERS.stream]: "1",
        [HEADERS.tier]: "3",
        [HEADERS.fallbackModels]: "b, c",
        [HEADERS.sort]: "quality",
        [HEADERS.deadline]: "5000",
      }),
      0,
    );
    expect(r).toMatchObject({
      model: "m",
      stream: true,
      tier: 3,
      fallbackModels: ["b", "c"],
      sort: "quality",
      deadline: 5000,
    });
  });

  it.each([
    [{ [HEADERS.type]: "route.request.v0" }, HEADERS.type],
    [{ [HEADERS.model]: "" }, HEADERS.model],
    [{ [HEADERS.path]: "/admin" }, HEADERS.path],
    [{ [HEADERS.tier]: "5" }, HEADERS.tier],
    [{ [HEADERS.sort]: "cheapest" }, HEADERS.sort],
  ])("rejects a bad header %#", (set, param) => {
    let error: unknown;
    try {
      readRouteHeaders(headers(set), 0);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ZmlError);
    expect((error as ZmlError).param).toBe(param);
  });
});
