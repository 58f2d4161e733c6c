import { Counter } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";

export interface DispatcherMetrics {
  decisions: Counter<"outcome">;
  attempts: Counter<"node" | "outcome">;
  retries: Counter<"kind">;
  cooldowns: Counter<"node">;
  refusedAnswers: Counter<"node" | "code">;
  refusedAddresses: Counter<"node" | "rule">;
  saturation: Counter<"reason">;
  queueTimeouts: Counter;
  sessions: Counter<"outcome">;
  prefixPromptTokens: Counter<"node">;
  prefixExpectedCachedTokens: Counter<"node">;
  prefixPlacements: Counter<"event">;
}

export function createDispatcherMetrics(registry: Registry): DispatcherMetrics {
  const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
    new Counter<L>({ name, help, labelNames, registers: [registry] });
  return {
    decisions: counter(
      "zml_dispatcher_decisions_total",
      "Routing outcomes (routed, saturated, no_node_for_model_tier, attempts_exhausted, ...)",
      ["outcome"],
    ),
    attempts: counter(
      "zml_dispatcher_attempts_total",
      "Dispatch attempts by node and outcome (relayed, retryable, broken)",
      ["node", "outcome"],
    ),
    retries: counter(
      "zml_dispatcher_retries_total",
      "Attempts after the first: retry on another node or fallback to another model",
      ["kind"],
    ),
    cooldowns: counter(
      "zml_dispatcher_cooldowns_total",
      "Nodes put into cooldown after a failure",
      ["node"],
    ),
    refusedAnswers: counter(
      "zml_dispatcher_refused_answers_total",
      "Node answers the gateway refused to relay: upstream_auth_failed (the node refused the " +
        "gateway's credential), bad_upstream_response (no JSON or SSE where due)",
      ["node", "code"],
    ),
    refusedAddresses: counter(
      "zml_dispatcher_node_address_refusals_total",
      "Node connections the node address policy refused after DNS, by rule (node_address_loopback, " +
        "node_address_unspecified, node_address_metadata, node_address_denied): nothing was sent",
      ["node", "rule"],
    ),
    saturation: counter(
      "zml_dispatcher_saturation_total",
      "Requests answered 503 because no node could take them",
      ["reason"],
    ),
    queueTimeouts: counter(
      "zml_dispatcher_queue_timeouts_total",
      "Queued requests that found no capacity within max_queue_ms",
      [],
    ),
    sessions: counter(
      "zml_dispatcher_sessions_total",
      "Tier-4 session events (created, create_<error>, deleted, node_unavailable)",
      ["outcome"],
    ),
    prefixPromptTokens: counter(
      "zml_dispatcher_prefix_prompt_tokens_total",
      "Prompt tokens (estimated, 4 characters each) of requests dispatched with prefix " +
        "affinity, by node: the denominator of the expected hit rate",
      ["node"],
    ),
    prefixExpectedCachedTokens: counter(
      "zml_dispatcher_prefix_expected_cached_tokens_total",
      "Prompt tokens the chosen node was expected to hold in its prefix cache, by node; " +
        "compare with the node's own hits (zml_node_prefix_cache_hit_ratio)",
      ["node"],
    ),
    prefixPlacements: counter(
      "zml_dispatcher_prefix_placements_total",
      "Prefix placements shared with the other replicas: sent_bytes, received_bytes, and " +
        "dropped (placements over the byte budget)",
      ["event"],
    ),
  };
}
