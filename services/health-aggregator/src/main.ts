// Composition root: the shared boot (libs/runtime), then what only the health aggregator
// has: the real probe (HTTP through keep-alive agents, refusing addresses nodes may not have)
// and the cloud price sources of the spot-price feed.
import { nodeAddressPolicyOf } from "@zml/contracts";
import { bootService } from "@zml/runtime";
import { startHealthAggregator } from "./app.ts";
import { loadConfig } from "./config.ts";
import { priceSourcesOf } from "./cost-feed.ts";
import { createNodeProber } from "./probe.ts";

const boot = bootService("health-aggregator", process.env, loadConfig, {
  replicaId: (config) => config.AGGREGATOR_REPLICA_ID,
  ops: (config) => ({ host: config.AGGREGATOR_OPS_HOST, port: config.AGGREGATOR_OPS_PORT }),
});
const { config } = boot;
const prober = createNodeProber({
  keepAliveMs: config.POLL_INTERVAL_MS * 2,
  timeoutMs: config.PROBE_TIMEOUT_MS,
  maxBodyBytes: config.PROBE_MAX_BODY_BYTES,
  nodeAddresses: nodeAddressPolicyOf(config),
});
await boot.serve(
  (parts) =>
    startHealthAggregator({
      ...parts,
      self: parts.replica,
      probe: prober.probe,
      clock: Date.now,
      random: Math.random,
      priceSources: priceSourcesOf(config),
    }),
  { readyFields: (aggregator) => aggregator.summary(), afterStop: () => prober.close() },
);
