import type { PolicySpec } from "../fleet.ts";

/**
 * A `latency` policy that tries `families` in the order given and fails fast when none has
 * capacity (no queueing). The latency target is a minute, so that in a test only the chain
 * and capacity decide where a request goes, never the target.
 */
export function chainPolicy(
  name: string,
  families: readonly string[],
  overrides: Partial<PolicySpec> = {},
): PolicySpec {
  return {
    name,
    accelerator_preference: families.map((family, i) => ({ family, priority: i + 1 })),
    latency_target_ms: 60_000,
    cost_priority: "latency",
    queue_on_saturation: false,
    max_queue_ms: 0,
    prefix_affinity: true,
    ...overrides,
  };
}
