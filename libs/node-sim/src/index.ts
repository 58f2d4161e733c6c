/**
 * A simulated LLM inference node that speaks the real vLLM and TGI wire formats: the
 * OpenAI-compatible API (JSON and SSE), `/health`, Prometheus `/metrics`, plus a `/_sim/*`
 * control API to inject faults, change pacing and read what the node received. In TEE mode
 * (tiers 3–4) it also serves TDX quotes signed through a test certificate chain.
 */
export { startSimNode } from "./sim-node.ts";
export { SIM_BODY_LIMIT_BYTES } from "./inference-routes.ts";
export { parseSimFault, parseSimConfigPatch, SimInputError, SIM_FAULT_KINDS } from "./validate.ts";
export { SIM_FLAVOURS } from "./types.ts";
export { createSniffingServer } from "./h2c-sniff.ts";
export { loadTestTeeMaterial } from "./tee-material.ts";
export { createReportDataQuoter } from "./tee.ts";
export type { ReportDataQuoter } from "./tee.ts";
export type { TestTeeMaterial } from "./tee-material.ts";
export type {
  SimFlavour,
  SimFault,
  SimFaultKind,
  SimRuntimeConfig,
  SimStats,
  SimLastRequest,
  SimNode,
  SimNodeOptions,
  SimTeeOptions,
  SimTeeSigner,
} from "./types.ts";
