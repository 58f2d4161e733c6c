import type { JobStatus } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import { createPeerTracker } from "../src/batch/peer-liveness.ts";
import { decideRedelivery } from "../src/batch/redelivery.ts";
import type { RedeliveryView } from "../src/batch/redelivery.ts";

const NOW = 1_000_000;
const status = (over: Partial<JobStatus>): JobStatus => ({
  type: "job.status.v1",
  job_id: "j-1",
  account: "acct",
  status: "running",
  http_status: null,
  error_code: null,
  attempts: 0,
  deliveries: 1,
  updated_at: NOW - 1_000,
  ...over,
});
const view = (over: Partial<RedeliveryView>): RedeliveryView => ({
  deliveryCount: 2,
  stored: false,
  status: undefined,
  self: "d-self",
  heldHere: false,
  alive: () => true,
  now: NOW,
  maxHoldMs: 60_000,
  ...over,
});

describe("decideRedelivery", () => {
  it("finishes from a stored result whatever the status says", () => {
    expect(decideRedelivery(view({ stored: true, status: status({ worker: "d-2" }) }))).toEqual({
      kind: "stored",
    });
  });

  it("waits while a live replica (or this one) holds the job, running or waiting for capacity", () => {
    expect(decideRedelivery(view({ status: status({ worker: "d-2" }) }))).toEqual({
      kind: "wait",
      holder: "d-2",
    });
    expect(decideRedelivery(view({ status: status({ status: "queued", worker: "d-2" }) }))).toEqual(
      { kind: "wait", holder: "d-2" },
    );
    expect(decideRedelivery(view({ heldHere: true }))).toEqual({ kind: "wait", holder: "d-self" });
  });

  it("runs a job whose holder died, as a re-execution when the holder had started it", () => {
    const dead = () => false;
    expect(decideRedelivery(view({ alive: dead, status: status({ worker: "d-2" }) }))).toEqual({
      kind: "run",
      reexecution: true,
    });
    // It was only waiting for capacity there: nothing ran.
    expect(
      decideRedelivery(
        view({ alive: dead, status: status({ status: "queued", worker: "d-2", deliveries: 1 }) }),
      ),
    ).toEqual({ kind: "run", reexecution: false });
  });

  it("does not wait for a holder past the hold bound, nor for a status naming this replica it no longer holds", () => {
    const old = status({ worker: "d-2", updated_at: NOW - 60_000 });
    expect(decideRedelivery(view({ status: old }))).toEqual({ kind: "run", reexecution: true });
    expect(decideRedelivery(view({ status: status({ worker: "d-self" }) }))).toEqual({
      kind: "run",
      reexecution: true,
    });
  });

  it("counts no re-execution after a retry or a hand-back, and one when the previous delivery left no status", () => {
    const retried = status({ status: "queued", deliveries: 1 });
    expect(decideRedelivery(view({ status: retried }))).toEqual({
      kind: "run",
      reexecution: false,
    });
    // The queued status is from two deliveries back: the last one's writes were lost.
    expect(decideRedelivery(view({ deliveryCount: 3, status: retried }))).toEqual({
      kind: "run",
      reexecution: true,
    });
    expect(decideRedelivery(view({ status: undefined }))).toEqual({
      kind: "run",
      reexecution: true,
    });
  });
});

describe("createPeerTracker", () => {
  const tracker = () => createPeerTracker({ self: "me", lossAfterMs: 3_000, startedAt: 0 });

  it("counts a replica alive within its loss bound, and dead once silent or leaving", () => {
    const t = tracker();
    t.beat("d-2", 250, 10_000);
    expect(t.alive("d-2", 12_900)).toBe(true);
    expect(t.alive("d-2", 13_100)).toBe(false);
    // A slow beater gets three of its intervals.
    t.beat("d-3", 2_000, 10_000);
    expect(t.alive("d-3", 15_500)).toBe(true);
    t.left("d-3");
    expect(t.alive("d-3", 10_001)).toBe(false);
    t.beat("d-3", 250, 10_002); // a late beat does not bring a leaver back
    expect(t.alive("d-3", 10_003)).toBe(false);
  });

  it("gives replicas it has not heard of the benefit of the doubt only while it is new itself", () => {
    const t = tracker();
    expect(t.alive("unknown", 2_000)).toBe(true);
    expect(t.alive("unknown", 3_500)).toBe(false);
    expect(t.alive("me", 1_000_000)).toBe(true);
  });
});
