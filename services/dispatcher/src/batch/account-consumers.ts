import { consumerBacklog, openPullConsumer } from "@zml/bus";
import type { Bus, BusLogger, JobMessage, PullConsumer } from "@zml/bus";
import { JOB_STREAMS, accountJobsFilter } from "@zml/contracts";
import type { AccountSpec } from "@zml/contracts";
import type { DispatcherConfig } from "../config.ts";
import type { BatchMetrics } from "./batch-metrics.ts";

export interface AccountConsumersDeps {
  bus: Bus;
  accounts: {
    map: ReadonlyMap<string, AccountSpec>;
    onChange(listener: () => void): () => void;
  };
  metrics: BatchMetrics;
  log: BusLogger;
  config: Pick<DispatcherConfig, "BATCH_ACK_WAIT_MS" | "BATCH_MAX_DELIVERIES">;
  /**
   * Takes one pulled job; the account's consumer pulls its next job only once the returned
   * promise settles (the job started, or ended without starting).
   */
  take: (account: string, msg: JobMessage) => Promise<void>;
}

const durableOf = (account: string) => `zml-batch-${account}`;

/**
 * One durable pull consumer per account on the jobs work queue, following the accounts in
 * KV: a new account gets a consumer, a removed one's consumer stops pulling. Every replica
 * uses the same durable names, so replicas share each account's jobs.
 */
export async function startAccountConsumers(deps: AccountConsumersDeps): Promise<{ stop(): void }> {
  const loops = new Map<string, { stop: () => void }>();
  let stopped = false;

  const pullLoop = async (account: string, consumer: PullConsumer, isStopped: () => boolean) => {
    while (!stopped && !isStopped()) {
      let msg: JobMessage | null;
      try {
        msg = await consumer.next(5_000);
      } catch (err) {
        deps.log.warn({ account, err: String(err) }, "job pull failed; retrying");
        await new Promise((r) => setTimeout(r, 1_000));
        continue;
      }
      if (msg) await deps.take(account, msg);
    }
  };

  const sync = async () => {
    for (const [account, loop] of loops) {
      if (!deps.accounts.map.has(account)) {
        loop.stop();
        loops.delete(account);
      }
    }
    for (const account of deps.accounts.map.keys()) {
      if (loops.has(account)) continue;
      let accountStopped = false;
      loops.set(account, { stop: () => (accountStopped = true) });
      const consumer = await openPullConsumer(deps.bus, {
        stream: JOB_STREAMS.jobs,
        durable: durableOf(account),
        filterSubject: accountJobsFilter(account),
        ackWaitMs: deps.config.BATCH_ACK_WAIT_MS,
        maxDeliver: deps.config.BATCH_MAX_DELIVERIES + 1,
      });
      void pullLoop(account, consumer, () => accountStopped);
    }
  };
  await sync();
  const unsubscribe = deps.accounts.onChange(() => {
    sync().catch((err: unknown) =>
      deps.log.error({ err: String(err) }, "batch consumers not updated"),
    );
  });
  const depthTimer = setInterval(() => {
    void (async () => {
      for (const account of loops.keys()) {
        const backlog = await consumerBacklog(deps.bus, JOB_STREAMS.jobs, durableOf(account));
        if (backlog !== null) deps.metrics.queueDepth.set({ account }, backlog);
      }
    })();
  }, 5_000);

  return {
    stop() {
      stopped = true;
      unsubscribe();
      clearInterval(depthTimer);
      for (const loop of loops.values()) loop.stop();
    },
  };
}
