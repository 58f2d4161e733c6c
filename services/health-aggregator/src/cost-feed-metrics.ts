import { PRICE_ERROR_KINDS } from "@zml/cost-feed";
import type { CostFeedMetrics } from "@zml/cost-feed";
import { Counter, Gauge } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";

/**
 * The spot-price feed's metrics. An account's series live on the replica running its feed
 * only, so summing over replicas counts each account once.
 */
export function createCostFeedMetrics(registry: Registry): CostFeedMetrics {
  const registers = [registry];
  const lastSuccess = new Gauge({
    name: "zml_cost_feed_last_success_timestamp_seconds",
    help: "When the account's spot prices were last refreshed successfully (Unix seconds)",
    labelNames: ["account"],
    registers,
  });
  const changed = new Counter({
    name: "zml_cost_feed_prices_changed_total",
    help: "Spot prices written that differ from the account's previous price for the node",
    labelNames: ["account"],
    registers,
  });
  const errors = new Counter({
    name: "zml_cost_feed_errors_total",
    help: "Refreshes or node prices that failed, by kind (throttled, auth, malformed, bad_price, ...)",
    labelNames: ["account", "kind"],
    registers,
  });
  const price = new Gauge({
    name: "zml_cost_spot_usd_per_gpu_hour",
    help: "The node's spot price as last fetched, USD per GPU-hour",
    labelNames: ["account", "node"],
    registers,
  });
  return {
    success: (account, atMs) => lastSuccess.set({ account }, atMs / 1000),
    changed: (account) => changed.inc({ account }),
    error: (account, kind) => errors.inc({ account, kind }),
    price: (account, node, usd) => price.set({ account, node }, usd),
    forget(account, nodes) {
      lastSuccess.remove({ account });
      changed.remove({ account });
      for (const kind of PRICE_ERROR_KINDS) errors.remove({ account, kind });
      for (const node of nodes) price.remove({ account, node });
    },
  };
}
