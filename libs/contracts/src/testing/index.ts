// Test-only builders of the fleet's records (node, policy, node state, attestation result),
// in the package that owns their types so that every package, this one included, can use
// them without a dependency circle. Never import from production code.
export { nodeSpec } from "./node-spec.ts";
export { chainPolicy } from "./policy-spec.ts";
export { activeNodeState } from "./node-state.ts";
export { attestationResult } from "./attestation-result.ts";
