// A silent node costs only the per-attempt first-byte limit derived from the policy's
// latency_target_ms (issue 21), not the dispatcher's 30 s headers timeout. Observed at nodes
// of our own: the silent one sees its request abandoned, the next one answers.
import type { PolicySpec } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostileNodeSpec, startHostileNode } from "../support/hostile-node.ts";
import type { HostileNode } from "../support/hostile-node.ts";
import { authHeaders, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

const TARGET_MS = 1_500;
const SSE =
  'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n';

let stack: Stack;
const nodes = new Map<string, HostileNode>();

/** Tries the silent family first, then the one that answers. */
const policy = (name: string, silent: string, extra: Partial<PolicySpec> = {}): PolicySpec => ({
  name,
  accelerator_preference: [
    { family: silent, priority: 1 },
    { family: "OK", priority: 2 },
  ],
  latency_target_ms: TARGET_MS,
  cost_priority: "latency",
  queue_on_saturation: false,
  max_queue_ms: 0,
  ...extra,
});

beforeAll(async () => {
  // Accept, read the request, never answer.
  const silent = () => startHostileNode(() => undefined);
  nodes.set("silent-stream", await silent());
  nodes.set("silent-plain", await silent());
  nodes.set(
    "answers",
    await startHostileNode((req, res) => {
      const stream = req.headers.accept === "text/event-stream";
      res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json" });
      res.end(stream ? SSE : '{"id":"c1","object":"chat.completion","choices":[]}');
    }),
  );
  stack = await startStack({
    nodes: [],
    fleet: {
      models: [
        { id: "derived", default_policy: "derived" },
        { id: "override", default_policy: "override" },
      ],
      policies: [
        policy("derived", "SILENT1"),
        policy("override", "SILENT2", { latency_target_ms: 60_000, first_byte_timeout_ms: 1_200 }),
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
      spec("answers", "OK", ["derived", "override"], 2),
    ],
  });
  await waitForStatus(stack, "Active", [...nodes.keys()]);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await Promise.all([...nodes.values()].map((n) => n.close()));
});

async function timed(model: string, stream: boolean) {
  const started = Date.now();
  const res = await fetch(`${stack.intakeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "x" }] }),
  });
  const text = await res.text();
  return { status: res.status, text, ms: Date.now() - started };
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
});
