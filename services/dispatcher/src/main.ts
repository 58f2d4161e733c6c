// Composition root: the shared boot (libs/runtime), then what only the dispatcher has: its
// node credentials, and the clock and randomness it hands its app.
import { randomBytes } from "node:crypto";
import { bootService } from "@zml/runtime";
import { startDispatcher } from "./app.ts";
import { loadConfig } from "./config.ts";
import { loadNodeSecrets } from "./node/secrets.ts";

const boot = bootService("dispatcher", process.env, loadConfig, {
  replicaId: (config) => config.DISPATCHER_REPLICA_ID,
  ops: (config) => ({ host: config.DISPATCHER_OPS_HOST, port: config.DISPATCHER_OPS_PORT }),
});
const secrets = loadNodeSecrets(boot.config.ZML_NODE_SECRETS_FILE);
await boot.serve(
  (parts) =>
    startDispatcher({
      ...parts,
      secrets,
      clock: Date.now,
      random: Math.random,
      randomHex: (bytes) => randomBytes(bytes).toString("hex"),
    }),
  { readyFields: (dispatcher) => ({ nodes: dispatcher.nodeCount }) },
);
