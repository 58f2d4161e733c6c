import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { SimInputError, startSimNode } from "../src/index.ts";
import type { SimNode } from "../src/index.ts";
import { CHAT_BODY, collectStream, post, readJson, sseData, waitFor } from "./helpers.ts";
import type { ErrorEnvelope } from "./helpers.ts";

const MODELS = ["llama-3-8b"];
const STREAM_BODY = { ...CHAT_BODY, stream: true };

function start(completionTokens = 6): Promise<SimNode> {
  return startSimNode({ nodeId: "f", flavour: "vllm", models: MODELS, completionTokens });
}

function putFault(node: SimNode, body: unknown): Promise<Response> {
  return fetch(`${node.url}/_sim/fault`, { method: "PUT", body: JSON.stringify(body) });
}

const chat = (node: SimNode, body: unknown = CHAT_BODY, init?: RequestInit): Promise<Response> =>
  post(`${node.url}/v1/chat/completions`, body, init);

describe("faults", () => {
  it("status: answers with the status, then clears itself after `times`", async () => {
    await using node = await start();
    const put = await putFault(node, { kind: "status", status: 500, times: 2 });
    expect(put.status).toBe(200);
    expect(await put.json()).toEqual({ fault: { kind: "status", status: 500, times: 2 } });

    for (let i = 0; i < 2; i++) {
      const res = await chat(node);
      expect(res.status).toBe(500);
      expect((await readJson<ErrorEnvelope>(res)).error).toMatchObject({
        code: 500,
        type: "InternalServerError",
      });
    }
    expect((await chat(node)).status).toBe(200);
    expect(node.fault()).toBeNull();
    expect(await (await fetch(`${node.url}/_sim/fault`)).json()).toEqual({ fault: null });
  });

  it("status 429 and 503 carry Retry-After", async () => {
    await using node = await start();
    await putFault(node, { kind: "status", status: 429 });
    const limited = await chat(node);
    expect(limited.status).toBe(429);
    expect(limited.headers.get("retry-after")).toBe("1");
    node.setFault({ kind: "status", status: 503, retryAfterS: 7 });
    const unavailable = await chat(node);
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers.get("retry-after")).toBe("7");
    node.setFault({ kind: "status", status: 402 });
    const payment = await chat(node);
    expect(payment.status).toBe(402);
    expect(payment.headers.get("retry-after")).toBeNull();
  });

  it("reset: the connection drops without an answer", async () => {
    await using node = await start();
    node.setFault({ kind: "reset", times: 1 });
    await expect(chat(node)).rejects.toThrow();
    expect(node.stats().payloads_received).toBe(1);
    expect((await chat(node)).status).toBe(200);
  });

  it("hang: the request is read and never answered until the node closes", async () => {
    const node = await start();
    node.setFault({ kind: "hang" });
    let settled = false;
    const pending = chat(node).finally(() => {
      settled = true;
    });
    await waitFor(
      () => node.stats(),
      (s) => s.payloads_received === 1,
      "the payload",
    );
    // Health and metrics still answer while the inference request hangs.
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    expect(node.stats().in_flight).toBe(1);
    expect(settled).toBe(false);
    await node.close();
    await expect(pending).rejects.toThrow();
  });

  it("slow_first_token: delays the first token by at least delayMs", async () => {
    await using node = await start();
    node.setFault({ kind: "slow_first_token", delayMs: 300, times: 1 });
    const started = performance.now();
    const res = await chat(node, STREAM_BODY);
    expect(res.status).toBe(200);
    const reader = collectStream(res);
    await waitFor(
      () => reader.text(),
      (t) => t.includes("data: "),
      "the first event",
    );
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    expect(await reader.ended).toBe("done");
    expect(sseData(reader.text()).at(-1)).toBe("[DONE]");
  });

  it("cut_stream: sends afterChunks events, then the connection breaks without [DONE]", async () => {
    await using node = await start();
    await putFault(node, { kind: "cut_stream", afterChunks: 3 });
    const res = await chat(node, STREAM_BODY);
    expect(res.status).toBe(200);
    const reader = collectStream(res);
    expect(await reader.ended).toBe("error");
    const data = sseData(reader.text());
    expect(data).toHaveLength(3);
    expect(data).not.toContain("[DONE]");
    for (const d of data) expect(() => JSON.parse(d) as unknown).not.toThrow();

    // A non-streamed request gets a truncated body.
    const whole = await chat(node);
    expect(whole.status).toBe(200);
    await expect(whole.text()).rejects.toThrow();
    expect(node.stats().completed).toBe(0);
  });

  it("stall_stream: sends afterChunks events, then nothing while the socket stays open", async () => {
    await using node = await start();
    node.setFault({ kind: "stall_stream", afterChunks: 2 });
    const abort = new AbortController();
    const res = await chat(node, STREAM_BODY, { signal: abort.signal });
    const reader = collectStream(res);
    await waitFor(
      () => sseData(reader.text()).length,
      (n) => n === 2,
      "two events",
    );
    // Still open: the request holds its slot and the stream has not ended.
    expect(node.stats()).toMatchObject({ running: 1, in_flight: 1, completed: 0 });
    let ended = false;
    void reader.ended.then(() => {
      ended = true;
    });
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    expect(ended).toBe(false);
    expect(sseData(reader.text())).toHaveLength(2);

    abort.abort();
    expect(await reader.ended).toBe("error");
    await waitFor(
      () => node.stats(),
      (s) => s.running === 0 && s.in_flight === 0,
      "slot freed",
    );
  });

  it("malformed_chunk: one event is not JSON, the stream still ends with [DONE]", async () => {
    await using node = await start(3);
    node.setFault({ kind: "malformed_chunk", afterChunks: 1, times: 1 });
    const data = sseData(await (await chat(node, STREAM_BODY)).text());
    expect(data[1]).toBe("{not json");
    expect((): unknown => JSON.parse(data[1]!)).toThrow();
    expect(data.at(-1)).toBe("[DONE]");
    // role chunk + malformed + 3 tokens + [DONE]
    expect(data).toHaveLength(6);

    node.setFault({ kind: "malformed_chunk", afterChunks: 0 });
    const whole = await chat(node);
    expect(whole.status).toBe(200);
    await expect(whole.json()).rejects.toThrow();
  });

  it("health_fail: health answers 503 while inference keeps working", async () => {
    await using node = await start();
    node.setFault({ kind: "health_fail", times: 2 });
    expect((await fetch(`${node.url}/health`)).status).toBe(503);
    expect((await chat(node)).status).toBe(200);
    expect((await fetch(`${node.url}/health`)).status).toBe(503);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });

  it("DELETE clears the fault", async () => {
    await using node = await start();
    await putFault(node, { kind: "status", status: 502 });
    expect((await chat(node)).status).toBe(502);
    const cleared = await fetch(`${node.url}/_sim/fault`, { method: "DELETE" });
    expect(await cleared.json()).toEqual({ fault: null });
    expect((await chat(node)).status).toBe(200);
  });

  it("rejects bad fault bodies with 400 and names the field", async () => {
    await using node = await start();
    const cases: [unknown, string | null][] = [
      [{ kind: "explode" }, "fault.kind"],
      [{ kind: "status" }, "fault.status"],
      [{ kind: "status", status: 200 }, "fault.status"],
      [{ kind: "status", status: 429, retryAfterS: -1 }, "fault.retryAfterS"],
      [{ kind: "cut_stream", after_chunks: 1 }, "fault.after_chunks"],
      [{ kind: "cut_stream", afterChunks: 1.5 }, "fault.afterChunks"],
      [{ kind: "slow_first_token", delayMs: "100" }, "fault.delayMs"],
      [{ kind: "reset", times: 0 }, "fault.times"],
      [[], "fault"],
      [null, "fault"],
    ];
    for (const [body, param] of cases) {
      const res = await putFault(node, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await readJson<ErrorEnvelope>(res)).error).toMatchObject({
        code: "invalid_fault",
        param,
      });
    }
    const notJson = await fetch(`${node.url}/_sim/fault`, { method: "PUT", body: "{" });
    expect(notJson.status).toBe(400);
    expect(node.fault()).toBeNull();

    expect(() => node.setFault({ kind: "hang", times: -1 })).toThrow(SimInputError);
  });
});
