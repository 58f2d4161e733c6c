// Composition root: the shared boot (libs/runtime), then what only the attestation service
// has: its trust material, read once, and the real quote fetch.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { bootService } from "@zml/runtime";
import { startAttestation } from "./app.ts";
import { loadConfig } from "./config.ts";
import { fetchNodeQuote } from "./quote-fetch.ts";
import { loadTrust } from "./trust.ts";

const boot = bootService("attestation", process.env, loadConfig, {
  ops: (config) => ({ host: config.ATTESTATION_OPS_HOST, port: config.ATTESTATION_OPS_PORT }),
});
const { config, log } = boot;
const trust = await loadTrust(config, (path) => readFile(path, "utf8"));
if (!trust.intelRoot) {
  log.warn(
    { file: config.ATTESTATION_TRUST_ROOT_PEM_FILE },
    "trust anchor is not Intel's SGX root CA: dev and tests only",
  );
}
await boot.serve(
  (parts) =>
    startAttestation({
      ...parts,
      policy: trust.policy,
      fetchQuote: (node, nonce, options) =>
        fetchNodeQuote(node.endpoint, nonce, config.ATTESTATION_QUOTE_TIMEOUT_MS, options),
      clock: Date.now,
      randomHex: (bytes) => randomBytes(bytes).toString("hex"),
    }),
  { readyFields: (app) => app.summary() },
);
