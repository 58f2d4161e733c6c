// The batch worker's queues and their rules, with no I/O: which jobs wait for capacity (in
// arrival order), which run, which deliveries wait for another holder, which ticket holds
// each job key, and what stop hands back. The worker does the bus, the route and the timers;
// the time is always passed in.
import { jobKey } from "@zml/contracts";

/** What the queues read of a pulled job. */
export interface QueuedJob {
  account: string;
  jobId: string;
  /** When JetStream took the job (epoch ms): how long it has waited in all. */
  submittedAt: number;
  /** When its delivery was last kept alive (epoch ms); written by {@link BatchQueues.progressDue}. */
  lastProgressAt: number;
}

export interface BatchQueues<T extends QueuedJob, R> {
  /**
   * Queues a job for capacity behind those already waiting; from now on it holds its job key
   * (a delivery of the same job made meanwhile waits for this one).
   */
  enqueue(job: T): void;
  /** The waiting jobs, oldest first: a copy, so starting them may change the queue. */
  waiting(): T[];
  waitingCount(): number;
  /** Takes a job off the waiting list: it started, or ended without starting. */
  leaveWaiting(job: T): void;
  /**
   * Whether a waiting job has waited its whole allowance: `maxQueueMs` counts from when
   * JetStream took it, not from when this delivery came.
   */
  expired(job: T, now: number, maxQueueMs: number): boolean;
  /**
   * Whether a job's delivery is due an in-progress ack (one every third of the ack wait);
   * when it is, counts it as sent now.
   */
  progressDue(job: T, now: number): boolean;
  /** A job now running on a node, with what keeps its delivery alive (`keepAlive`). */
  startRunning(job: T, keepAlive: R): void;
  isRunning(job: T): boolean;
  runningCount(): number;
  /** A run ended: the job leaves the running jobs and no longer holds its key. */
  endRun(job: T): void;
  /** Whether another ticket of this replica holds the job's key (waiting or running). */
  heldHereByAnother(job: T): boolean;
  /** The job no longer holds its key here (it finished, or was handed back). */
  release(job: T): void;
  /** A delivery that waits for the replica holding another delivery of the same job; true when new. */
  hold(job: T): boolean;
  /** The held deliveries: a copy, so looking them up may change the set. */
  heldDeliveries(): T[];
  /** A held delivery stops waiting: it finished from its stored result, or is queued to run. */
  unhold(job: T): void;
  /**
   * On stop, what is handed back at once: the waiting jobs (they release their keys) and the
   * held deliveries. Both lists are emptied.
   */
  takeWaitingAndHeld(): { waiting: T[]; held: T[] };
  /**
   * After stop's deadline, the jobs still running, with their keep-alives: they leave the
   * running jobs and release their keys, to be handed back.
   */
  takeRunning(): Array<[T, R]>;
}

/** Empty queues; `progressEveryMs` is how often a waiting or held delivery is kept alive. */
export function createBatchQueues<T extends QueuedJob, R>(
  progressEveryMs: number,
): BatchQueues<T, R> {
  const waiting: T[] = [];
  /** Jobs running on a node, with what keeps their delivery alive. */
  const running = new Map<T, R>();
  /** Jobs this replica holds (waiting or running), by job key. */
  const holding = new Map<string, T>();
  /** Deliveries waiting for the replica that holds another delivery of the same job. */
  const held = new Set<T>();
  const keyOf = (job: QueuedJob) => jobKey(job.account, job.jobId);
  const release = (job: T) => {
    if (holding.get(keyOf(job)) === job) holding.delete(keyOf(job));
  };

  return {
    enqueue(job) {
      holding.set(keyOf(job), job);
      waiting.push(job);
    },
    waiting: () => [...waiting],
    waitingCount: () => waiting.length,
    leaveWaiting(job) {
      const i = waiting.indexOf(job);
      if (i >= 0) waiting.splice(i, 1);
    },
    expired: (job, now, maxQueueMs) => !(now - job.submittedAt < maxQueueMs),
    progressDue(job, now) {
      if (!(now - job.lastProgressAt >= progressEveryMs)) return false;
      job.lastProgressAt = now;
      return true;
    },
    startRunning(job, keepAlive) {
      running.set(job, keepAlive);
    },
    isRunning: (job) => running.has(job),
    runningCount: () => running.size,
    endRun(job) {
      running.delete(job);
      release(job);
    },
    heldHereByAnother(job) {
      const mine = holding.get(keyOf(job));
      return mine !== undefined && mine !== job;
    },
    release,
    hold(job) {
      const fresh = !held.has(job);
      held.add(job);
      return fresh;
    },
    heldDeliveries: () => [...held],
    unhold(job) {
      held.delete(job);
    },
    takeWaitingAndHeld() {
      const handedBack = { waiting: waiting.splice(0), held: [...held] };
      for (const job of handedBack.waiting) release(job);
      held.clear();
      return handedBack;
    },
    takeRunning() {
      const still = [...running];
      for (const [job] of still) {
        running.delete(job);
        release(job);
      }
      return still;
    },
  };
}
