import type { NodeSpec } from "../fleet.ts";

/**
 * A tier-1 vLLM node on H100 serving chat and completions, as `apply` stores it once the
 * schema filled in its defaults. `endpoint` is a name that never resolves: tests that call
 * the node pass the URL of the simulated node they started.
 */
export function nodeSpec(id: string, overrides: Partial<NodeSpec> = {}): NodeSpec {
  return {
    id,
    endpoint: `http://${id}.internal:8000`,
    framework: "vllm",
    accelerator_family: "H100",
    tier: 1,
    models: ["m"],
    apis: ["chat", "completions"],
    max_concurrency: 16,
    health_path: "/health",
    metrics_path: "/metrics",
    registered_at: 0,
    ...overrides,
  };
}
