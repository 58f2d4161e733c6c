// The spot-price feed's home: each cloud account's feed runs on exactly one aggregator
// replica, the one that rendezvous-hashes the account among the live replicas, just as each
// node is polled by exactly one. The replica set already agrees on its members without
// talking, hands a dead replica's work to the survivors within one TTL, and freezes when it
// cannot see itself (so no two replicas both think they own everything).
import { watchBucket } from "@zml/bus";
import type { Bus, KV } from "@zml/bus";
import { CloudAccountSpecSchema, CloudSpotCostSchema, KV_BUCKETS } from "@zml/contracts";
import type { CloudAccountSpec, NodeSpec } from "@zml/contracts";
import {
  createAwsSpotSource,
  createAzureSpotSource,
  createCostFeed,
  createGcpSpotSource,
} from "@zml/cost-feed";
import type { CostFeedMetrics, PriceSource } from "@zml/cost-feed";
import type { CloudProvider } from "@zml/contracts";
import type { Logger } from "@zml/telemetry";
import type { AggregatorConfig } from "./config.ts";
import { rendezvousOwner } from "./rendezvous.ts";

/** The real price clients, at the configured endpoints; none when the feed is off. */
export function priceSourcesOf(
  config: AggregatorConfig,
): Readonly<Record<CloudProvider, PriceSource>> | undefined {
  if (!config.COST_FEED_ENABLED) return undefined;
  return {
    aws: createAwsSpotSource({
      endpoint: config.COST_FEED_AWS_ENDPOINT,
      maxAttempts: config.COST_FEED_AWS_MAX_ATTEMPTS,
    }),
    azure: createAzureSpotSource({ baseUrl: config.COST_FEED_AZURE_URL }),
    gcp: createGcpSpotSource({ baseUrl: config.COST_FEED_GCP_URL }),
  };
}

export interface CostFeedHomeDeps {
  bus: Bus;
  /** The costs bucket; this identity may write only its `spot.` keys. */
  costs: KV;
  sources: Readonly<Record<CloudProvider, PriceSource>>;
  metrics: CostFeedMetrics;
  log: Logger;
  clock: () => number;
  random: () => number;
  jitter: number;
}

export interface CostFeedHome {
  setReplicas(replicas: readonly string[]): void;
  setNodes(nodes: ReadonlyMap<string, NodeSpec>): void;
  running(): string[];
  stop(): void;
}

/** Rendezvous key of an account's feed: apart from node ids, so the two spread separately. */
const feedKey = (accountId: string) => `cost-feed/${accountId}`;

export async function startCostFeedHome(
  self: string,
  deps: CostFeedHomeDeps,
): Promise<CostFeedHome> {
  const log = deps.log.child({ component: "cost-feed" });
  const feed = createCostFeed({
    sources: deps.sources,
    store: {
      put: async (key, entry) => {
        await deps.costs.put(key, JSON.stringify(CloudSpotCostSchema.parse(entry)));
      },
    },
    metrics: deps.metrics,
    log,
    clock: deps.clock,
    random: deps.random,
    jitter: deps.jitter,
  });
  let replicas: readonly string[] = [self];
  let nodes: ReadonlyMap<string, NodeSpec> = new Map();
  let loaded = false;
  const apply = () => {
    if (!loaded) return;
    const mine = new Map<string, CloudAccountSpec>();
    for (const [id, spec] of accounts.map) {
      if (rendezvousOwner(feedKey(id), replicas) === self) mine.set(id, spec);
    }
    feed.update(mine, nodes);
  };
  const accounts = await watchBucket(deps.bus, KV_BUCKETS.cloudAccounts, {
    schema: CloudAccountSpecSchema,
    log,
    onChange: () => apply(),
  });
  loaded = true;
  apply();
  return {
    setReplicas(next) {
      replicas = next;
      apply();
    },
    setNodes(next) {
      nodes = next;
      apply();
    },
    running: () => feed.running(),
    stop() {
      accounts.stop();
      feed.stop();
    },
  };
}
