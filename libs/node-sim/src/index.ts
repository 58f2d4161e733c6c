/**
 * A simulated LLM inference node that speaks the real vLLM and TGI wire formats: the
 * OpenAI-compatible API (JSON and SSE), `/health`, Prometheus `/metrics`, plus a `/_sim/*`
 * control API to inject faults, change pacing and read what the node received.
 */
export { startSimNode, SIM_BODY_LIMIT_BYTES } from "./sim-node.ts";
export { parseSimFault, parseSimConfigPatch, SimInputError, SIM_FAULT_KINDS } from "./validate.ts";
export { SIM_FLAVOURS } from "./types.ts";
export type {
  SimFlavour,
  SimFault,
  SimFaultKind,
  SimRuntimeConfig,
  SimStats,
  SimLastRequest,
  SimNode,
  SimNodeOptions,
} from "./types.ts";
