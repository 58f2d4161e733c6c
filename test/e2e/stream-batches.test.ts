import { decodeFrameBatch, headerOf, natsConnectionOf } from "@zml/bus";
import type { IncomingFrame } from "@zml/bus";
import { HEADERS, inboxPrefixOf, REPLY_BATCH } from "@zml/contracts";
import { nodeSpec } from "@zml/contracts/testing";
import { pollUntil } from "@zml/harness";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLockstepNodes } from "../support/lockstep-nodes.ts";
import type { LockstepNodes } from "../support/lockstep-nodes.ts";
import { authHeaders, e2eFleet, startStack, waitForStatus } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";

// Streams share frame batches: the dispatcher sends the frames of one turn for one intake as
// one bus message. One stream's node dies mid-stream, in the same step as the other streams'
// tokens: its error frame travels batched like their chunks, and only that stream ends
// with `event: error`; the others complete. So that the death and the other tokens reach the
// dispatcher together whatever the machine's timing, the dispatcher is paused (SIGSTOP)
// while they are sent, and resumed once they wait in its sockets.

const TOKENS = 60;
const STEADY = 4;
const models = [{ id: "steady" }, { id: "doomed" }];

describe("a stream that breaks inside a frame batch", () => {
  let stack: Stack;
  let nodes: LockstepNodes;
  /** Every frame batch intake received, in order. */
  const batches: IncomingFrame[][] = [];
  /** Answer frames intake received alone (a turn's only frame for it). */
  let alone = 0;
  /** The inboxes of `error` frames, batched or alone: the last token names the request. */
  const errors: string[] = [];

  beforeAll(async () => {
    nodes = await startLockstepNodes(["lock-steady", "lock-doomed"], {
      stepMs: 25,
      tokens: TOKENS,
    });
    stack = await startStack({ nodes: [], fleet: { models } });
    const spec = (id: string, model: string, i: number) =>
      nodeSpec(id, {
        endpoint: nodes.urls.get(id)!,
        models: [model],
        max_concurrency: 64,
        registered_at: i,
      });
    await stack.apply(
      e2eFleet([spec("lock-steady", "steady", 0), spec("lock-doomed", "doomed", 1)], { models }),
    );
    await waitForStatus(stack, "Active", ["lock-steady", "lock-doomed"]);
    // The harness identity may read intake's inbox: what crossed the bus towards intake.
    natsConnectionOf(stack.bus).subscribe(`${inboxPrefixOf("intake")}.>`, {
      callback: (_err, msg) => {
        const kind = headerOf(msg.headers, HEADERS.replyKind);
        if (kind !== REPLY_BATCH.kind) {
          alone++;
          if (kind === "error") errors.push(msg.subject.slice(msg.subject.lastIndexOf(".") + 1));
          return;
        }
        const batch = decodeFrameBatch(msg.data);
        if (!batch.ok) return;
        batches.push(batch.frames);
        for (const f of batch.frames) if (f.kind === "error") errors.push(f.id);
      },
    });
    await natsConnectionOf(stack.bus).flush();
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await nodes?.close();
  });

  const stream = async (model: string) => {
    const res = await request(`${stack.intakeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "Hi" }] }),
    });
    return { status: res.statusCode, text: await res.body.text() };
  };

  it("ends only that stream with an error event; the others in its batches complete", async () => {
    const steady = Array.from({ length: STEADY }, () => stream("steady"));
    const doomed = stream("doomed");
    // Mid-stream: the doomed node has sent a third of its tokens, and the dispatcher has
    // relayed frames of all five streams in one batch (so the doomed stream's answer has
    // started: on a busy machine the node can be ahead of the dispatcher's reads).
    await pollUntil(() => nodes.sent("lock-doomed") >= TOKENS / 3, { timeoutMs: 20_000 });
    await pollUntil(() => batches.some((b) => new Set(b.map((f) => f.id)).size === STEADY + 1), {
      timeoutMs: 20_000,
      message: "a batch with frames of all five streams",
    });
    const dispatcher = stack.services.get("dispatcher")!.pid;
    process.kill(dispatcher, "SIGSTOP");
    try {
      nodes.killAtNextStep("lock-doomed");
      await pollUntil(() => nodes.dead("lock-doomed"), { timeoutMs: 5_000 });
      // A step more of the others' tokens behind the reset.
      const sent = nodes.sent("lock-steady");
      await pollUntil(() => nodes.sent("lock-steady") >= sent + STEADY, { timeoutMs: 5_000 });
    } finally {
      process.kill(dispatcher, "SIGCONT");
    }

    const broken = await doomed;
    expect(broken.status).toBe(200);
    expect(broken.text).toContain("data: {");
    expect(broken.text).toMatch(/event: error\ndata: .*"code":"stream_interrupted"/);
    expect(broken.text).not.toContain("[DONE]");

    const expected = Array.from({ length: TOKENS }, (_, i) => `t${i} `).join("");
    for (const done of await Promise.all(steady)) {
      expect(done.status).toBe(200);
      expect(done.text).not.toContain("event: error");
      expect(done.text.endsWith("data: [DONE]\n\n")).toBe(true);
      const text = [...done.text.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1]).join("");
      expect(text).toBe(expected);
    }

    // On the bus: up to its death the doomed stream shared batches with the others, and its
    // error frame went to intake like any frame. (undici learns of a closed socket in the
    // event loop's close phase, after the turn's batch went out, so the error frame leaves in
    // a later turn, alone or batched: `frame-batch.test.ts` checks an error and other
    // streams' chunks in one batch.)
    await natsConnectionOf(stack.bus).flush();
    expect(batches.length).toBeGreaterThan(alone);
    const lastError = errors.at(-1);
    expect(lastError).toBeDefined();
    const doomedId = lastError!;
    const shared = batches.filter(
      (b) => b.some((f) => f.id === doomedId) && new Set(b.map((f) => f.id)).size === STEADY + 1,
    );
    expect(shared.length).toBeGreaterThan(0);
    // Tokens that arrived together went as one frame per stream: two steps' events in one.
    expect(batches.some((b) => b.some((f) => f.kind === "chunk" && f.data.length > 200))).toBe(
      true,
    );
  }, 60_000);
});
