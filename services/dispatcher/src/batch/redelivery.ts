// What a worker does with a job JetStream delivered again: finish it from the result an
// earlier delivery stored, wait while another live delivery holds it, or run it (and whether
// that run is a re-execution). Pure: the lookups and the clock are passed in.
import type { JobStatus } from "@zml/contracts";

export type RedeliveryDecision =
  /** An earlier delivery stored the result (its ack was lost): ack, do not run. */
  | { kind: "stored" }
  /** Another delivery, on a live replica (or this one), holds the job: wait for it. */
  | { kind: "wait"; holder: string }
  /**
   * Nobody holds it any more: run it. `reexecution` when an earlier execution may have run
   * on a node without an end anybody recorded.
   */
  | { kind: "run"; reexecution: boolean };

export interface RedeliveryView {
  /** JetStream's delivery count of this delivery (2 or more). */
  deliveryCount: number;
  /** A result is stored for the job. */
  stored: boolean;
  /** The job's status record, if there is one. */
  status: JobStatus | undefined;
  /** This replica's id. */
  self: string;
  /** This replica already holds another delivery of the job (waiting or running). */
  heldHere: boolean;
  /** Whether a replica may still hold jobs (its liveness beats go on). */
  alive: (replica: string) => boolean;
  now: number;
  /**
   * A holder whose status is older than this is not waited for any more: a bound for
   * holders that live on but lost the job (longer than any job may run).
   */
  maxHoldMs: number;
}

const HELD = new Set<JobStatus["status"]>(["queued", "running"]);

export function decideRedelivery(view: RedeliveryView): RedeliveryDecision {
  if (view.stored) return { kind: "stored" };
  if (view.heldHere) return { kind: "wait", holder: view.self };
  const { status } = view;
  const holder = status?.worker;
  if (
    status &&
    holder !== undefined &&
    holder !== view.self &&
    HELD.has(status.status) &&
    view.alive(holder) &&
    view.now - status.updated_at < view.maxHoldMs
  ) {
    return { kind: "wait", holder };
  }
  // Not a re-execution only when the delivery before this one is known not to have left a
  // run behind: it ended in a retry or a hand-back (`queued`, nobody holding), or it was
  // still waiting for capacity when its replica died (`queued` by that replica). A status
  // that says `running`, or none from the previous delivery (a write lost), may hide one.
  const previousQueued =
    status !== undefined &&
    status.status === "queued" &&
    status.deliveries === view.deliveryCount - 1;
  return { kind: "run", reexecution: !previousQueued };
}
