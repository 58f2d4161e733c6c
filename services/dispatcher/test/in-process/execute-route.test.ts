// executeRoute's paths through a dispatcher started in-process (see dispatcher-rig.ts):
// real nats-server, real sockets to simulated nodes, no child processes.
import { pollUntil } from "@zml/harness";
import type { PolicySpec } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { afterEach, describe, expect, it } from "vitest";
import { FALLBACK_MODEL, MODEL, startRig } from "./dispatcher-rig.ts";
import type { Rig, RigOptions } from "./dispatcher-rig.ts";

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.stop();
  rig = undefined;
});
const start = async (options: RigOptions) => (rig = await startRig(options));

const policy = (name: string, extra: Partial<PolicySpec> = {}): PolicySpec =>
  chainPolicy(name, ["H100", "MI300X"], extra);
const ordered = policy("ordered");
/** One node per family: the chain decides which is first. */
const twoFamilies: RigOptions = {
  nodes: [
    { id: "h1", family: "H100" },
    { id: "m1", family: "MI300X" },
  ],
  policies: [ordered],
};

describe("dispatcher in process: one attempt", () => {
  it("relays the node's answer with the routing header", async () => {
    const r = await start(twoFamilies);
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(200);
    expect(answer.frames.map((f) => f.kind)).toEqual(["full"]);
    expect(answer.routing).toMatchObject({ node: "h1", policy: "ordered", family: "H100" });
    expect(answer.routing?.attempts).toBe(1);
    expect(JSON.parse(answer.text)).toMatchObject({ object: "chat.completion", model: MODEL });
    expect(r.payloads()).toEqual({ h1: 1, m1: 0 });
  });

  it("resolves no named policy to the built-in balanced one", async () => {
    const r = await start(twoFamilies);
    const answer = await r.send();
    expect(answer.status).toBe(200);
    expect(answer.routing?.policy).toBe("balanced");
  });

  it("streams as head, chunks and an explicit end", async () => {
    const r = await start(twoFamilies);
    const answer = await r.send({ policy: "ordered", stream: true });
    const kinds = answer.frames.map((f) => f.kind);
    expect(kinds[0]).toBe("head");
    expect(kinds.at(-1)).toBe("end");
    expect(kinds.filter((k) => k === "chunk").length).toBeGreaterThan(0);
    expect(answer.text).toContain("data: [DONE]");
  });

  it("returns a 4xx as it is, without a retry", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "status", status: 400 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(400);
    expect(answer.routing).toMatchObject({ node: "h1", attempts: 1 });
    expect(r.payloads()).toEqual({ h1: 1, m1: 0 });
  });
});

describe("dispatcher in process: retries and fallback", () => {
  it("retries a 5xx on the next family and cools the failed node down", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "status", status: 503, times: 1 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    // h1 rests for the cooldown: the next request goes straight to m1.
    const next = await r.send({ policy: "ordered" });
    expect(next.routing).toMatchObject({ node: "m1", attempts: 1 });
    expect(r.payloads()).toEqual({ h1: 1, m1: 2 });
  });

  it("retries a reset connection like a 5xx", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "reset", times: 1 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
  });

  it("retries a plain answer whose body breaks before it is relayed", async () => {
    // The node declares the whole body's length, sends half of it and closes: nothing
    // reached the client, so the next node may answer (status 200 is no answer here).
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "cut_stream", afterChunks: 0, times: 1 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    expect(r.payloads()).toEqual({ h1: 1, m1: 1 });
  });

  it("falls back to the next model when the first one's nodes fail", async () => {
    const r = await start({
      nodes: [
        { id: "h1", family: "H100", models: [MODEL] },
        { id: "m1", family: "MI300X", models: [FALLBACK_MODEL] },
      ],
      policies: [ordered],
    });
    r.sims.get("h1")!.setFault({ kind: "status", status: 500 });
    const answer = await r.send({ policy: "ordered", fallbackModels: [FALLBACK_MODEL] });
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    // The fallback node receives the body with its own model name.
    expect(JSON.parse(answer.text)).toMatchObject({ model: FALLBACK_MODEL });
  });

  it("stops after 3 attempts in total", async () => {
    const r = await start({
      nodes: ["h1", "h2", "h3", "h4"].map((id) => ({ id, family: "H100" })),
      policies: [ordered],
    });
    for (const sim of r.sims.values()) sim.setFault({ kind: "status", status: 502 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.error).toMatchObject({ code: "upstream_unavailable" });
    expect(answer.error?.message).toMatch(/^3 attempt\(s\) failed/);
    expect(Object.values(r.payloads()).reduce((a, b) => a + b, 0)).toBe(3);
  });

  it("ends with gateway_timeout when the deadline passes before an attempt succeeds", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "hang" });
    const answer = await r.send({ policy: "ordered", deadlineMs: 600 });
    expect(answer.error).toMatchObject({ code: "gateway_timeout" });
    expect(r.payloads().m1).toBe(0);
  });

  it("never retries after the first byte: a broken stream ends with an error frame", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "cut_stream", afterChunks: 2 });
    const answer = await r.send({ policy: "ordered", stream: true });
    expect(answer.frames[0]!.kind).toBe("head");
    expect(answer.frames.at(-1)!.kind).toBe("error");
    expect(answer.frames.some((f) => f.kind === "end")).toBe(false);
    expect(r.payloads()).toEqual({ h1: 1, m1: 0 });
  });
});

describe("dispatcher in process: answers the gateway refuses", () => {
  it("retries a node's own 401 elsewhere and cools it down; alone, answers upstream_auth_failed", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "status", status: 401 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    // h1 rests: the next request goes straight to m1.
    expect((await r.send({ policy: "ordered" })).routing).toMatchObject({
      node: "m1",
      attempts: 1,
    });
    r.sims.get("m1")!.setFault({ kind: "status", status: 403 });
    const refused = await r.send({ policy: "ordered" });
    expect(refused.error).toMatchObject({ code: "upstream_auth_failed" });
    expect(refused.error?.message).toBe(
      "1 attempt(s) failed; last: m1 refused the gateway's credential (403)",
    );
    // The node's own message stays out of the answer.
    expect(refused.error?.message).not.toContain("simulated fault");
    expect(r.payloads()).toEqual({ h1: 1, m1: 3 });
  });

  it("retries an answer that is not JSON elsewhere; alone, answers bad_upstream_response", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "malformed_chunk", afterChunks: 0 });
    const answer = await r.send({ policy: "ordered" });
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    expect(JSON.parse(answer.text)).toMatchObject({ object: "chat.completion" });
    r.sims.get("m1")!.setFault({ kind: "malformed_chunk", afterChunks: 0 });
    const refused = await r.send({ policy: "ordered" });
    expect(refused.error).toMatchObject({ code: "bad_upstream_response" });
    expect(refused.error?.message).toContain("m1 answered a body that is not JSON");
  });

  it("fails a stream over when its headers come at once and its first token too late", async () => {
    const r = await start({
      ...twoFamilies,
      policies: [policy("quick", { first_byte_timeout_ms: 300 })],
    });
    r.sims.get("h1")!.setFault({ kind: "slow_first_token", delayMs: 30_000, times: 1 });
    const answer = await r.send({ policy: "quick", stream: true });
    expect(answer.routing).toMatchObject({ node: "m1", attempts: 2 });
    expect(answer.frames[0]!.kind).toBe("head");
    expect(answer.frames.at(-1)!.kind).toBe("end");
    expect(answer.text).toContain("data: [DONE]");
    expect(r.payloads()).toEqual({ h1: 1, m1: 1 });
  });
});

describe("dispatcher in process: no node", () => {
  it("rejects a policy nobody registered, naming the field", async () => {
    const r = await start(twoFamilies);
    const answer = await r.send({ policy: "nope" });
    expect(answer.error).toMatchObject({ code: "unknown_policy", param: "policy" });
    expect(r.payloads()).toEqual({ h1: 0, m1: 0 });
  });

  it("answers no_node_available for a model no node serves", async () => {
    const r = await start({ ...twoFamilies, models: [{ id: MODEL }, { id: "other" }] });
    const answer = await r.send({ model: "other" });
    expect(answer.error).toMatchObject({ code: "no_node_available", param: "model" });
  });

  it("fails fast when every node is full, and waits under queue_on_saturation", async () => {
    const r = await start({
      nodes: [{ id: "h1", family: "H100", maxConcurrency: 1, sim: { ttftMs: 800 } }],
      policies: [ordered, policy("queued", { queue_on_saturation: true, max_queue_ms: 15_000 })],
    });
    const first = r.send({ policy: "ordered" });
    await pollUntil(() => r.sims.get("h1")!.stats().in_flight === 1);
    const rejected = await r.send({ policy: "ordered" });
    expect(rejected.error).toMatchObject({ code: "saturated" });
    const queued = r.send({ policy: "queued" });
    expect((await first).status).toBe(200);
    const answer = await queued;
    expect(answer.status).toBe(200);
    expect(answer.routing).toMatchObject({ node: "h1", attempts: 1 });
  });
});

describe("dispatcher in process: cancellation", () => {
  it("aborts the node call when the client goes away", async () => {
    const r = await start(twoFamilies);
    r.sims.get("h1")!.setFault({ kind: "hang" });
    let sent: Parameters<Rig["cancel"]>[0] | undefined;
    void r.send({ policy: "ordered", onSent: (pending) => (sent = pending) });
    await pollUntil(() => r.sims.get("h1")!.stats().in_flight === 1);
    sent!.cancel();
    r.cancel(sent!);
    await pollUntil(() => r.sims.get("h1")!.stats().in_flight === 0, { timeoutMs: 5_000 });
    expect(r.payloads()).toEqual({ h1: 1, m1: 0 });
  });
});

describe("dispatcher in process: expected tokens", () => {
  it("judges a request by its max_tokens against the latency target", async () => {
    // h1 (first in the chain) at 100 tok/s: 16 tokens take 160 ms, 4000 take 40 s.
    const r = await start({
      nodes: [
        { id: "h1", family: "H100", tokensPerSecond: 100 },
        { id: "m1", family: "MI300X", tokensPerSecond: 100_000 },
      ],
      policies: [policy("tight", { latency_target_ms: 1_000 })],
    });
    const short = await r.send({ policy: "tight", maxTokens: 16, body: { max_tokens: 16 } });
    expect(short.routing?.node).toBe("h1");
    const long = await r.send({ policy: "tight", maxTokens: 4000, body: { max_tokens: 4000 } });
    expect(long.routing?.node).toBe("m1");
  });
});
