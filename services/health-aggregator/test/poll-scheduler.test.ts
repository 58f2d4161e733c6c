import type { NodeSpec } from "@zml/contracts";
import { pollUntil } from "@zml/harness";
import { describe, expect, it } from "vitest";
import { createPollScheduler } from "../src/poll-scheduler.ts";
import { spec as nodeSpec } from "./helpers.ts";

const spec = (id: string): NodeSpec => nodeSpec(id, 1);

/** A scheduler that counts the polls of each node; `hang` names nodes whose probe never ends. */
function countingScheduler(jitter: number, concurrency: number, hang: readonly string[] = []) {
  const polls = new Map<string, number>();
  const scheduler = createPollScheduler({
    intervalMs: 10,
    jitter,
    concurrency,
    random: Math.random,
    poll: (node) => {
      polls.set(node.id, (polls.get(node.id) ?? 0) + 1);
      return hang.includes(node.id) ? new Promise<void>(() => {}) : Promise.resolve();
    },
  });
  return { polls, scheduler };
}

describe("poll scheduler", () => {
  it("keeps polling healthy nodes while another node's probe hangs", async () => {
    const { polls, scheduler } = countingScheduler(0.1, 2, ["hang"]);
    scheduler.sync(
      new Map([
        ["hang", spec("hang")],
        ["fast", spec("fast")],
      ]),
    );
    await pollUntil(() => (polls.get("fast") ?? 0) >= 10, { timeoutMs: 5_000 });
    expect(polls.get("hang")).toBe(1);
    scheduler.stop();
  });

  it("starts polling added nodes and stops polling removed ones", async () => {
    const { polls, scheduler } = countingScheduler(0, 4);
    scheduler.sync(new Map([["a", spec("a")]]));
    await pollUntil(() => polls.get("a"));
    scheduler.sync(new Map([["b", spec("b")]]));
    await pollUntil(() => (polls.get("b") ?? 0) >= 3);
    const aAfterRemoval = polls.get("a")!;
    await pollUntil(() => (polls.get("b") ?? 0) >= 6);
    expect(polls.get("a")).toBe(aAfterRemoval);
    scheduler.stop();
  });

  it("keeps one polling loop per node when a node is removed and re-added mid-poll", async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    let polls = 0;
    let releaseFirst: () => void = () => {};
    const scheduler = createPollScheduler({
      intervalMs: 1,
      jitter: 0,
      concurrency: 4,
      random: Math.random,
      poll: async () => {
        polls++;
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        if (polls === 1) await new Promise<void>((r) => (releaseFirst = r));
        else await new Promise((r) => setTimeout(r, 3));
        inFlight--;
      },
    });
    const nodes = new Map([["a", spec("a")]]);
    scheduler.sync(nodes);
    await pollUntil(() => polls === 1);
    scheduler.sync(new Map());
    scheduler.sync(nodes);
    await pollUntil(() => polls >= 2);
    releaseFirst();
    await new Promise((r) => setImmediate(r)); // let the released poll finish
    maxInFlight = inFlight;
    await pollUntil(() => polls >= 40, { timeoutMs: 10_000 });
    scheduler.stop();
    // Two loops for one node would overlap their 3 ms polls.
    expect(maxInFlight).toBe(1);
  });

  it("does not poll a node removed while its poll waited for a slot", async () => {
    const polls = new Map<string, number>();
    let releaseBusy: () => void = () => {};
    const scheduler = createPollScheduler({
      intervalMs: 1_000,
      jitter: 0,
      concurrency: 1,
      random: Math.random,
      poll: (node) => {
        polls.set(node.id, (polls.get(node.id) ?? 0) + 1);
        return node.id === "busy" ? new Promise<void>((r) => (releaseBusy = r)) : Promise.resolve();
      },
    });
    scheduler.sync(new Map([["busy", spec("busy")]]));
    await pollUntil(() => polls.get("busy") === 1);
    scheduler.sync(
      new Map([
        ["busy", spec("busy")],
        ["queued", spec("queued")],
      ]),
    );
    await new Promise((r) => setTimeout(r, 5)); // the queued poll is now waiting for the slot
    scheduler.sync(new Map([["busy", spec("busy")]]));
    releaseBusy();
    await new Promise((r) => setTimeout(r, 20));
    scheduler.stop();
    expect(polls.get("queued")).toBeUndefined();
  });
});
