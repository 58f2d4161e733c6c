import { describe, expect, it } from "vitest";
import { createBatchQueues } from "../src/batch/batch-queues.ts";
import type { QueuedJob } from "../src/batch/batch-queues.ts";

const NOW = 1_000_000;
const PROGRESS_EVERY_MS = 10_000;

interface Job extends QueuedJob {
  name: string;
}
const job = (name: string, over: Partial<Job> = {}): Job => ({
  name,
  account: "acct",
  jobId: name,
  submittedAt: NOW,
  lastProgressAt: NOW,
  ...over,
});
const queues = () => createBatchQueues<Job, string>(PROGRESS_EVERY_MS);

describe("batch queues: waiting", () => {
  it("lists waiting jobs in arrival order, whatever their account", () => {
    const q = queues();
    const a1 = job("a1", { account: "a" });
    const b1 = job("b1", { account: "b" });
    const a2 = job("a2", { account: "a" });
    q.enqueue(a1);
    q.enqueue(b1);
    q.enqueue(a2);
    expect(q.waiting().map((j) => j.name)).toEqual(["a1", "b1", "a2"]);
    expect(q.waitingCount()).toBe(3);
  });

  it("hands out a copy: a job leaving while the list is walked leaves the others in order", () => {
    const q = queues();
    const [x, y, z] = [job("x"), job("y"), job("z")];
    for (const j of [x, y, z]) q.enqueue(j);
    const walked: string[] = [];
    for (const j of q.waiting()) {
      walked.push(j.name);
      if (j !== y) q.leaveWaiting(j);
    }
    expect(walked).toEqual(["x", "y", "z"]);
    expect(q.waiting()).toEqual([y]);
  });

  it("leaving twice takes nothing else off the list", () => {
    const q = queues();
    const [x, y] = [job("x"), job("y")];
    q.enqueue(x);
    q.enqueue(y);
    q.leaveWaiting(x);
    q.leaveWaiting(x);
    expect(q.waiting()).toEqual([y]);
  });

  it("a waiting job has expired once it waited its allowance since JetStream took it", () => {
    const q = queues();
    const j = job("j", { submittedAt: NOW - 5_000 });
    expect(q.expired(j, NOW, 5_001)).toBe(false);
    expect(q.expired(j, NOW, 5_000)).toBe(true);
    expect(q.expired(j, NOW, 0)).toBe(true);
  });

  it("a delivery is due a progress signal every progressEveryMs, counted from the last one", () => {
    const q = queues();
    const j = job("j", { lastProgressAt: NOW });
    expect(q.progressDue(j, NOW + PROGRESS_EVERY_MS - 1)).toBe(false);
    expect(j.lastProgressAt).toBe(NOW);
    expect(q.progressDue(j, NOW + PROGRESS_EVERY_MS)).toBe(true);
    expect(j.lastProgressAt).toBe(NOW + PROGRESS_EVERY_MS);
    expect(q.progressDue(j, NOW + PROGRESS_EVERY_MS + 1)).toBe(false);
    expect(q.progressDue(j, NOW + 2 * PROGRESS_EVERY_MS)).toBe(true);
  });
});

describe("batch queues: which ticket holds a job key", () => {
  it("a queued job holds its key: another delivery of the same job sees it held here", () => {
    const q = queues();
    const first = job("first", { jobId: "j-1" });
    const again = job("again", { jobId: "j-1" });
    expect(q.heldHereByAnother(again)).toBe(false);
    q.enqueue(first);
    expect(q.heldHereByAnother(again)).toBe(true);
    // Not by another: the holder itself.
    expect(q.heldHereByAnother(first)).toBe(false);
  });

  it("the same job id in another account is another key", () => {
    const q = queues();
    q.enqueue(job("a", { account: "a", jobId: "j-1" }));
    expect(q.heldHereByAnother(job("b", { account: "b", jobId: "j-1" }))).toBe(false);
  });

  it("the key stays held while the job runs and is released when its run ends", () => {
    const q = queues();
    const first = job("first", { jobId: "j-1" });
    const again = job("again", { jobId: "j-1" });
    q.enqueue(first);
    q.leaveWaiting(first);
    q.startRunning(first, "timer-1");
    expect(q.isRunning(first)).toBe(true);
    expect(q.runningCount()).toBe(1);
    expect(q.heldHereByAnother(again)).toBe(true);
    q.endRun(first);
    expect(q.isRunning(first)).toBe(false);
    expect(q.runningCount()).toBe(0);
    expect(q.heldHereByAnother(again)).toBe(false);
  });

  it("releasing a ticket that no longer holds the key leaves the newer holder", () => {
    const q = queues();
    const old = job("old", { jobId: "j-1" });
    const newer = job("newer", { jobId: "j-1" });
    const third = job("third", { jobId: "j-1" });
    q.enqueue(old);
    q.enqueue(newer);
    q.release(old);
    expect(q.heldHereByAnother(third)).toBe(true);
    q.release(newer);
    expect(q.heldHereByAnother(third)).toBe(false);
  });
});

describe("batch queues: held redeliveries", () => {
  it("holds a delivery once, says so only the first time, and lets it go", () => {
    const q = queues();
    const j = job("j");
    expect(q.hold(j)).toBe(true);
    expect(q.hold(j)).toBe(false);
    expect(q.heldDeliveries()).toEqual([j]);
    q.unhold(j);
    expect(q.heldDeliveries()).toEqual([]);
  });

  it("a held delivery does not hold its job key", () => {
    const q = queues();
    q.hold(job("held", { jobId: "j-1" }));
    expect(q.heldHereByAnother(job("other", { jobId: "j-1" }))).toBe(false);
  });

  it("hands out a copy: letting a delivery go while the list is walked visits every one", () => {
    const q = queues();
    const [x, y] = [job("x"), job("y")];
    q.hold(x);
    q.hold(y);
    const walked: string[] = [];
    for (const j of q.heldDeliveries()) {
      walked.push(j.name);
      q.unhold(j);
    }
    expect(walked).toEqual(["x", "y"]);
  });
});

describe("batch queues: what stop hands back", () => {
  it("hands back every waiting job and held delivery at once, releasing the waiting jobs' keys", () => {
    const q = queues();
    const w1 = job("w1", { jobId: "j-1" });
    const w2 = job("w2", { jobId: "j-2" });
    const h = job("h", { jobId: "j-3" });
    const r = job("r", { jobId: "j-4" });
    q.enqueue(w1);
    q.enqueue(w2);
    q.hold(h);
    q.enqueue(r);
    q.leaveWaiting(r);
    q.startRunning(r, "timer-r");

    const back = q.takeWaitingAndHeld();
    expect(back.waiting).toEqual([w1, w2]);
    expect(back.held).toEqual([h]);
    expect(q.waiting()).toEqual([]);
    expect(q.heldDeliveries()).toEqual([]);
    expect(q.heldHereByAnother(job("x", { jobId: "j-1" }))).toBe(false);
    expect(q.heldHereByAnother(job("x", { jobId: "j-2" }))).toBe(false);
    // Running jobs may still finish: they stay, holding their keys.
    expect(q.isRunning(r)).toBe(true);
    expect(q.heldHereByAnother(job("x", { jobId: "j-4" }))).toBe(true);
  });

  it("after the deadline hands back the jobs still running, with their keep-alives", () => {
    const q = queues();
    const r1 = job("r1", { jobId: "j-1" });
    const r2 = job("r2", { jobId: "j-2" });
    q.enqueue(r1);
    q.enqueue(r2);
    q.leaveWaiting(r1);
    q.leaveWaiting(r2);
    q.startRunning(r1, "timer-1");
    q.startRunning(r2, "timer-2");
    q.endRun(r2);

    expect(q.takeRunning()).toEqual([[r1, "timer-1"]]);
    expect(q.runningCount()).toBe(0);
    // A handed-back run that ends later records nothing: it is no longer running.
    expect(q.isRunning(r1)).toBe(false);
    expect(q.heldHereByAnother(job("x", { jobId: "j-1" }))).toBe(false);
    expect(q.takeRunning()).toEqual([]);
  });

  it("with nothing queued, stop hands back nothing", () => {
    const q = queues();
    expect(q.takeWaitingAndHeld()).toEqual({ waiting: [], held: [] });
    expect(q.takeRunning()).toEqual([]);
  });
});
