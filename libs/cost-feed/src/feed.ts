import { spotCostKey } from "@zml/contracts";
import type { CloudAccountSpec, CloudProvider, CloudSpotCost, NodeSpec } from "@zml/contracts";
import { PriceSourceError } from "./errors.ts";
import type { PriceErrorKind } from "./errors.ts";
import { nextDelayMs } from "./schedule.ts";
import type { PriceSource, PriceTarget } from "./types.ts";

/** Where the feed keeps the cost table's spot entries (the costs KV bucket in production). */
export interface SpotCostStore {
  put(key: string, entry: CloudSpotCost): Promise<void>;
}

/** The feed's metrics, by account. */
export interface CostFeedMetrics {
  success(account: string, atMs: number): void;
  changed(account: string): void;
  error(account: string, kind: PriceErrorKind): void;
  price(account: string, nodeId: string, usdPerGpuHour: number): void;
  /** Drops an account's per-node series once this replica no longer runs its feed. */
  forget(account: string, nodeIds: readonly string[]): void;
}

/** The part of a pino logger the feed uses. */
export interface FeedLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface CostFeedDeps {
  sources: Readonly<Record<CloudProvider, PriceSource>>;
  store: SpotCostStore;
  metrics: CostFeedMetrics;
  log: FeedLogger;
  clock: () => number;
  random: () => number;
  /** See {@link nextDelayMs}. */
  jitter: number;
}

export interface CostFeed {
  /**
   * The accounts this replica runs the feed of, with the registered nodes. Accounts that
   * left stop (an in-flight refresh is abandoned), new ones refresh at once, changed ones
   * restart; the others keep their schedule.
   */
  update(
    accounts: ReadonlyMap<string, CloudAccountSpec>,
    nodes: ReadonlyMap<string, NodeSpec>,
  ): void;
  /** Accounts running here. */
  running(): string[];
  stop(): void;
}

interface Loop {
  spec: string;
  account: CloudAccountSpec;
  timer: NodeJS.Timeout | undefined;
  abort: AbortController;
  failures: number;
  lastKind: PriceErrorKind | undefined;
  /** The last price written per node, to count changes. */
  written: Map<string, number>;
}

/**
 * The spot-price feed: per cloud account, a refresh loop that asks the account's provider
 * for its nodes' prices and writes one `cloud_spot` entry per node (key
 * `spot.<account>.<node>`, `updated_at` = now, the account's age limit). A node whose price
 * could not be had keeps its previous entry, which ages out in routing by itself; one
 * account failing never holds up another.
 */
export function createCostFeed(deps: CostFeedDeps): CostFeed {
  const loops = new Map<string, Loop>();
  let nodes: ReadonlyMap<string, NodeSpec> = new Map();

  const schedule = (loop: Loop, delayMs: number) => {
    loop.timer = setTimeout(() => {
      loop.timer = undefined;
      // refresh() handles its own failures; this catches a bug in that handling, so that
      // the account's loop goes on (at the interval) instead of stopping without a word.
      refresh(loop).catch((err: unknown) => {
        deps.log.warn({ account: loop.account.id, err: String(err) }, "spot price refresh crashed");
        if (!loop.abort.signal.aborted && loop.timer === undefined) {
          schedule(loop, loop.account.refresh_interval_s * 1000);
        }
      });
    }, delayMs);
    loop.timer.unref();
  };

  const refresh = async (loop: Loop) => {
    const { account } = loop;
    const targets = targetsOf(account, nodes, (nodeId, message) => {
      deps.metrics.error(account.id, "config");
      deps.log.warn(
        { account: account.id, node: nodeId, kind: "config" },
        `spot price not looked up: ${message}`,
      );
    });
    try {
      if (targets.length > 0) {
        const result = await deps.sources[account.provider].fetch(
          account,
          targets,
          loop.abort.signal,
        );
        if (loop.abort.signal.aborted) return;
        const now = deps.clock();
        for (const quote of result.quotes) {
          const node = nodes.get(quote.nodeId)!;
          const entry: CloudSpotCost = {
            kind: "cloud_spot",
            cloud_account: account.id,
            family: node.accelerator_family,
            nodes: [node.id],
            usd_per_gpu_hour: quote.usdPerGpuHour,
            gpus_per_node: node.cloud!.gpus_per_instance,
            updated_at: now,
            max_age_ms: account.max_price_age_s * 1000,
            source: quote.source,
            ...(quote.quotedAt === undefined ? {} : { quoted_at: quote.quotedAt }),
          };
          await deps.store.put(spotCostKey(account.id, node.id), entry);
          const before = loop.written.get(node.id);
          if (before !== quote.usdPerGpuHour) {
            deps.metrics.changed(account.id);
            deps.log.info(
              {
                account: account.id,
                node: node.id,
                usd_per_gpu_hour: quote.usdPerGpuHour,
                previous: before ?? null,
              },
              "spot price changed",
            );
          }
          loop.written.set(node.id, quote.usdPerGpuHour);
          deps.metrics.price(account.id, node.id, quote.usdPerGpuHour);
        }
        for (const problem of result.problems) {
          deps.metrics.error(account.id, problem.error.kind);
          deps.log.warn(
            { account: account.id, node: problem.nodeId, kind: problem.error.kind },
            `spot price not updated, the previous one stands until it ages out: ${problem.error.message}`,
          );
        }
      }
      deps.metrics.success(account.id, deps.clock());
      loop.failures = 0;
      loop.lastKind = undefined;
    } catch (err) {
      if (loop.abort.signal.aborted) return;
      const error =
        err instanceof PriceSourceError
          ? err
          : new PriceSourceError("unavailable", `store or source failed: ${String(err)}`);
      loop.failures++;
      loop.lastKind = error.kind;
      deps.metrics.error(account.id, error.kind);
      deps.log.warn(
        {
          account: account.id,
          provider: account.provider,
          kind: error.kind,
          failures: loop.failures,
        },
        `spot prices not refreshed; previous prices stand until they age out: ${error.message}`,
      );
    }
    if (loop.abort.signal.aborted) return;
    schedule(
      loop,
      nextDelayMs({
        intervalMs: account.refresh_interval_s * 1000,
        jitter: deps.jitter,
        random: deps.random(),
        failures: loop.failures,
        kind: loop.lastKind,
      }),
    );
  };

  const stopLoop = (id: string) => {
    const loop = loops.get(id);
    if (!loop) return;
    loop.abort.abort();
    if (loop.timer) clearTimeout(loop.timer);
    loops.delete(id);
    deps.metrics.forget(id, [...loop.written.keys()]);
  };

  return {
    update(accounts, nextNodes) {
      nodes = nextNodes;
      for (const id of [...loops.keys()]) {
        const spec = accounts.get(id);
        if (spec === undefined || JSON.stringify(spec) !== loops.get(id)!.spec) stopLoop(id);
      }
      for (const [id, account] of accounts) {
        if (loops.has(id)) continue;
        const loop: Loop = {
          spec: JSON.stringify(account),
          account,
          timer: undefined,
          abort: new AbortController(),
          failures: 0,
          lastKind: undefined,
          written: new Map(),
        };
        loops.set(id, loop);
        // A new or taken-over account refreshes at once (spread over a second).
        schedule(loop, Math.floor(deps.random() * 1000));
        deps.log.info({ account: id, provider: account.provider }, "spot price feed started");
      }
    },
    running: () => [...loops.keys()],
    stop() {
      for (const id of [...loops.keys()]) stopLoop(id);
    },
  };
}

/** The account's nodes as price lookups; a node whose region the account lacks is skipped. */
function targetsOf(
  account: CloudAccountSpec,
  nodes: ReadonlyMap<string, NodeSpec>,
  skipped: (nodeId: string, message: string) => void,
): PriceTarget[] {
  const out: PriceTarget[] = [];
  for (const node of nodes.values()) {
    const cloud = node.cloud;
    if (cloud?.account !== account.id) continue;
    if (!account.regions.includes(cloud.region)) {
      skipped(node.id, `region ${cloud.region} is not one of account ${account.id}'s regions`);
      continue;
    }
    out.push({
      nodeId: node.id,
      region: cloud.region,
      zone: cloud.zone,
      instanceType: cloud.instance_type,
      gpuType: cloud.gpu_type,
      gpusPerInstance: cloud.gpus_per_instance,
    });
  }
  return out;
}
