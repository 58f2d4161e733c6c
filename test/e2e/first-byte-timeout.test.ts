// A silent node costs only the per-attempt first-byte limit derived from the policy's
// latency_target_ms, not the dispatcher's 30 s headers timeout, for a stream and for a plain
// answer alike. Observed at nodes of our own: the silent one sees its request abandoned once,
// and only once, the next one answers. Headers alone do not count as the first byte: a node
// that sends them at once and its answer (first token, or its JSON) 20 s later is failed over
// within the same limit. A long plain generation is not a silent node: the limit grows with
// the answer the node is expected to give.
import type { PolicySpec } from "@zml/contracts";
import { chainPolicy } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const TARGET_MS = 1_500;
/** When the late nodes send their first token: far past the limit and one more attempt. */
const LATE_TOKEN_MS = 20_000;
const SSE =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n';

const JSON_ANSWER = '{"id":"c1","object":"chat.completion","choices":[]}';
/** How long the slow (not silent) node takes to generate its plain answer. */
const SLOW_ANSWER_MS = 3_000;

let stack: Stack;
const nodes = new Map<string, HostileNode>();

/** Tries the silent family first, then the one that answers. */
const policy = (name: string, silent: string, extra: Partial<PolicySpec> = {}): PolicySpec =>
  chainPolicy(name, [silent, "OK"], { latency_target_ms: TARGET_MS, ...extra });

beforeAll(async () => {
  // Accept, read the request, never answer.
  const silent = () => startHostileNode(() => undefined);
  nodes.set("silent-stream", await silent());
  nodes.set("silent-plain", await silent());
  // 200 and SSE headers at once; the first token only after LATE_TOKEN_MS (as a node that
  // queues a request after accepting it), and meanwhile nothing, or keep-alive comments.
  const late = (keepAlive: boolean) =>
    startHostileNode((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      const ping = keepAlive ? setInterval(() => res.write(": keep-alive\n\n"), 300) : undefined;
      const token = setTimeout(() => res.end(SSE), LATE_TOKEN_MS);
      res.once("close", () => {
        clearInterval(ping);
        clearTimeout(token);
      });
    });
  nodes.set("late-token", await late(false));
  nodes.set("late-token-pings", await late(true));
  nodes.set("silent-plain-derived", await silent());
  nodes.set("silent-fallback", await silent());
  // 200 and JSON headers at once, the answer itself only after LATE_TOKEN_MS.
  nodes.set(
    "late-json",
    await startHostileNode((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      const answer = setTimeout(() => res.end(JSON_ANSWER), LATE_TOKEN_MS);
      res.once("close", () => clearTimeout(answer));
    }),
  );
  // A long generation: the whole answer after SLOW_ANSWER_MS, well past the latency target.
  nodes.set(
    "slow-answer",
    await startHostileNode((_req, res) => {
      const answer = setTimeout(
        () => res.writeHead(200, { "content-type": "application/json" }).end(JSON_ANSWER),
        SLOW_ANSWER_MS,
      );
      res.once("close", () => clearTimeout(answer));
    }),
  );
  nodes.set(
    "answers",
    await startHostileNode((req, res) => {
      const stream = req.headers.accept === "text/event-stream";
      res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json" });
      res.end(stream ? SSE : JSON_ANSWER);
    }),
  );
  stack = await startStack({
    nodes: [],
    fleet: {
      models: [
        { id: "derived", default_policy: "derived" },
        { id: "override", default_policy: "override" },
        { id: "late", default_policy: "late" },
        { id: "late-pings", default_policy: "late-pings" },
        { id: "plain", default_policy: "plain" },
        { id: "late-plain", default_policy: "late-plain" },
        { id: "fb-primary", default_policy: "fallback" },
        { id: "fb-secondary", default_policy: "fallback" },
        { id: "long", default_policy: "long" },
      ],
      policies: [
        policy("derived", "SILENT1"),
        policy("late", "LATE1"),
        policy("late-pings", "LATE2"),
        policy("override", "SILENT2", { latency_target_ms: 60_000, first_byte_timeout_ms: 1_200 }),
        policy("plain", "SILENT3"),
        policy("late-plain", "LATE3"),
        policy("fallback", "SILENT4"),
        policy("long", "SLOW"),
      ],
    },
  });
  const spec = (id: string, family: string, models: string[], i: number) => ({
    ...hostileNodeSpec(id, nodes.get(id)!, models[0]!, i),
    accelerator_family: family,
    models,
  });
  await stack.apply({
    ...stack.fleet,
    nodes: [
      spec("silent-stream", "SILENT1", ["derived"], 0),
      spec("silent-plain", "SILENT2", ["override"], 1),
      spec("late-token", "LATE1", ["late"], 3),
      spec("late-token-pings", "LATE2", ["late-pings"], 4),
      spec("silent-plain-derived", "SILENT3", ["plain"], 5),
      spec("late-json", "LATE3", ["late-plain"], 6),
      // Serves the request's model and its fallback model: tried once, for neither again.
      spec("silent-fallback", "SILENT4", ["fb-primary", "fb-secondary"], 7),
      spec("slow-answer", "SLOW", ["long"], 8),
      spec(
        "answers",
        "OK",
        [
          "derived",
          "override",
          "late",
          "late-pings",
          "plain",
          "late-plain",
          "fb-secondary",
          "long",
        ],
        2,
      ),
    ],
  });
  await waitForStatus(stack, "Active", [...nodes.keys()]);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await Promise.all([...nodes.values()].map((n) => n.close()));
});

async function timed(model: string, stream: boolean, extra: Record<string, unknown> = {}) {
  const started = Date.now();
  const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "x" }], ...extra }),
  });
  const text = await res.text();
  const routing = res.headers.get("x-zml-routing") ?? "";
  return { status: res.status, text, routing, ms: Date.now() - started };
}

describe("per-attempt first-byte limit", () => {
  it("a silent node costs a streamed request the policy's latency target, then the next node answers", async () => {
    const silent = nodes.get("silent-stream")!;
    const answers = nodes.get("answers")!;
    const before = answers.received();
    const { status, text, ms } = await timed("derived", true);
    expect(status).toBe(200);
    expect(text).toBe(SSE);
    expect(silent.received()).toBe(1);
    expect(answers.received()).toBe(before + 1);
    // The silent node's wait was cut at the limit: its connection was dropped.
    await pollUntil(() => silent.abandoned() === 1, { timeoutMs: 5_000, message: "abandoned" });
    // Never before the limit: it runs on a native timer (undici's own headers timeout, on its
    // coarse ~0.5 s ticks, could fire hundreds of milliseconds early). 2 ms is clock rounding.
    expect(ms).toBeGreaterThanOrEqual(TARGET_MS - 2);
    // Far below the 30 s headers timeout it used to cost (slack for a loaded machine).
    expect(ms).toBeLessThan(TARGET_MS + 5_000);
  }, 60_000);

  it("a policy's first_byte_timeout_ms overrides it, for a request that is not streamed too", async () => {
    const silent = nodes.get("silent-plain")!;
    const { status, ms } = await timed("override", false);
    expect(status).toBe(200);
    expect(silent.received()).toBe(1);
    await pollUntil(() => silent.abandoned() === 1, { timeoutMs: 5_000, message: "abandoned" });
    expect(ms).toBeGreaterThanOrEqual(1_200 - 2);
    expect(ms).toBeLessThan(1_200 + 5_000);
  }, 60_000);

  it.each([
    ["nothing", "late", "late-token"],
    ["keep-alive comments", "late-pings", "late-token-pings"],
  ])(
    "a stream whose headers come at once and first token after 20 s (%s before it) is failed over within the limit",
    async (_before, model, lateId) => {
      const lateNode = nodes.get(lateId)!;
      const answers = nodes.get("answers")!;
      const before = answers.received();
      const { status, text, routing, ms } = await timed(model, true);
      expect(status).toBe(200);
      // The other node's answer, whole, and nothing of the late node's (not its keep-alives).
      expect(text).toBe(SSE);
      expect(routing).toContain('node="answers"');
      expect(routing).toContain("attempts=2");
      expect(lateNode.received()).toBe(1);
      expect(answers.received()).toBe(before + 1);
      await pollUntil(() => lateNode.abandoned() === 1, { timeoutMs: 5_000, message: "abandoned" });
      // The first-byte limit plus one (instant) attempt, with slack for a loaded machine, and
      // far below the 20 s the late node would have cost.
      expect(ms).toBeGreaterThanOrEqual(TARGET_MS - 2);
      expect(ms).toBeLessThan(TARGET_MS + 5_000);
    },
    60_000,
  );

  describe("a plain (not streamed) answer", () => {
    // A short answer (16 tokens at the default guess of 100 tokens/s: 160 ms, estimated), so
    // the limit is the latency target itself.
    const short = { max_tokens: 16 };

    it("a silent node costs the latency target by default, once, then the next node answers", async () => {
      const silent = nodes.get("silent-plain-derived")!;
      const answers = nodes.get("answers")!;
      const before = answers.received();
      const { status, text, routing, ms } = await timed("plain", false, short);
      expect(status, text).toBe(200);
      expect(text).toBe(JSON_ANSWER);
      expect(routing).toContain('node="answers"');
      expect(routing).toContain("attempts=2");
      expect(silent.received()).toBe(1);
      expect(answers.received()).toBe(before + 1);
      await pollUntil(() => silent.abandoned() === 1, { timeoutMs: 5_000, message: "abandoned" });
      // One limit plus one (instant) answer: far below the 30 s headers timeout.
      expect(ms).toBeGreaterThanOrEqual(TARGET_MS - 2);
      expect(ms).toBeLessThan(TARGET_MS + 5_000);
    }, 60_000);

    it("a node that sends its headers at once and its JSON after 20 s is failed over within the limit", async () => {
      const late = nodes.get("late-json")!;
      const { status, text, routing, ms } = await timed("late-plain", false, short);
      expect(status, text).toBe(200);
      expect(text).toBe(JSON_ANSWER);
      expect(routing).toContain('node="answers"');
      expect(routing).toContain("attempts=2");
      expect(late.received()).toBe(1);
      await pollUntil(() => late.abandoned() === 1, { timeoutMs: 5_000, message: "abandoned" });
      expect(ms).toBeGreaterThanOrEqual(TARGET_MS - 2);
      expect(ms).toBeLessThan(TARGET_MS + 5_000);
    }, 60_000);

    it("a timed-out node is not tried again for the request's fallback model", async () => {
      const silent = nodes.get("silent-fallback")!;
      const answers = nodes.get("answers")!;
      const before = answers.received();
      const { status, routing, ms } = await timed("fb-primary", false, {
        ...short,
        models: ["fb-secondary"],
      });
      expect(status).toBe(200);
      expect(routing).toContain('node="answers"');
      expect(routing).toContain("attempts=2");
      expect(silent.received()).toBe(1);
      expect(answers.received()).toBe(before + 1);
      expect(ms).toBeLessThan(TARGET_MS + 5_000);
    }, 60_000);

    it("a long generation is waited for: the limit grows with the answer expected", async () => {
      // 2000 tokens at the default guess of 100 tokens/s: 20 s expected, so a node that takes
      // 3 s is generating, not silent, though the latency target is 1.5 s.
      const slow = nodes.get("slow-answer")!;
      const { status, text, routing, ms } = await timed("long", false, { max_tokens: 2_000 });
      expect(status, text).toBe(200);
      expect(routing).toContain('node="slow-answer"');
      expect(routing).toContain("attempts=1");
      expect(slow.received()).toBe(1);
      expect(slow.abandoned()).toBe(0);
      expect(ms).toBeGreaterThanOrEqual(SLOW_ANSWER_MS - 2);
    }, 60_000);
  });
});
