import {
  HEADERS,
  INFERENCE_PATH_APIS,
  isInferencePath,
  MESSAGE_TYPES,
  ZmlError,
} from "@zml/contracts";
import type { NodeApi } from "@zml/contracts";
import { headerOf } from "@zml/bus";
import type { MsgHdrs } from "@zml/bus";
import { decodePromptPrefix } from "@zml/routing";
import type { PromptPrefix } from "@zml/routing";

/**
 * A request as intake routed it onto the bus: the routing fields it extracted from the
 * client's body once, read back from the message headers (the body itself is never parsed).
 */
export interface RoutedRequest {
  requestId: string;
  model: string;
  path: string;
  /** The API of `path`: only nodes that serve it are candidates. */
  api: NodeApi;
  stream: boolean;
  tier: number;
  /** The policy intake resolved (trusted: looked up, not resolved again); absent on jobs
   * published straight to JetStream without one. */
  policy: string | undefined;
  account: string;
  acceleratorHint: string | undefined;
  /** Models to fall back to, in order, after `model`. */
  fallbackModels: string[];
  sort: "quality" | "price" | "latency" | undefined;
  sessionId: string | undefined;
  /**
   * A sealed tier-4 request's `key_id`: the body is then the sealed envelope, forwarded as it
   * is to the session's TD, which alone can open it.
   */
  sealedKeyId: string | undefined;
  /** The client's `max_tokens`, when it sent one: the output the decision expects. */
  maxTokens: number | undefined;
  /**
   * The prompt's block digests, for prefix affinity. A header that does not parse counts as
   * none: it only steers an estimate, so it never fails the request. Never read at tier 4.
   */
  prefix: PromptPrefix | undefined;
  /** Epoch ms after which the client no longer waits. */
  deadline: number;
}

/**
 * Reads the routing headers of a `route.request` message or a batch job (same headers,
 * another message type); throws ZmlError naming the bad header.
 */
export function readRouteHeaders(
  h: MsgHdrs | undefined,
  now: number,
  expectedType: string = MESSAGE_TYPES.routeRequestV1,
): RoutedRequest {
  const get = (name: string) => headerOf(h, name);
  const type = get(HEADERS.type);
  if (type !== expectedType) {
    throw new ZmlError("invalid_request", `unsupported message type '${type}'`, {
      param: HEADERS.type,
    });
  }
  const model = get(HEADERS.model);
  if (!model)
    throw new ZmlError("invalid_request", "model header missing", { param: HEADERS.model });
  // Only the inference paths the contracts name ever reach a node: a forged request must not
  // turn the operator's node credential into a key for the provider's other APIs.
  const path = get(HEADERS.path);
  if (!isInferencePath(path)) {
    throw new ZmlError("invalid_request", "not an inference path", { param: HEADERS.path });
  }
  const tier = Number(get(HEADERS.tier) || "1");
  if (!Number.isInteger(tier) || tier < 1 || tier > 4) {
    throw new ZmlError("invalid_request", "tier must be 1-4", { param: HEADERS.tier });
  }
  const deadlineHeader = Number(get(HEADERS.deadline));
  const sort = get(HEADERS.sort);
  if (sort && sort !== "quality" && sort !== "price" && sort !== "latency") {
    throw new ZmlError("invalid_request", "provider.sort must be quality, price or latency", {
      param: HEADERS.sort,
    });
  }
  const maxTokensHeader = get(HEADERS.maxTokens);
  const maxTokens = maxTokensHeader ? Number(maxTokensHeader) : undefined;
  if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && maxTokens > 0)) {
    throw new ZmlError("invalid_request", "max tokens must be a positive integer", {
      param: HEADERS.maxTokens,
    });
  }
  return {
    requestId: get(HEADERS.requestId),
    model,
    path,
    api: INFERENCE_PATH_APIS[path],
    stream: get(HEADERS.stream) === "1",
    tier,
    policy: get(HEADERS.policy) || undefined,
    account: get(HEADERS.account),
    acceleratorHint: get(HEADERS.acceleratorHint) || undefined,
    fallbackModels: get(HEADERS.fallbackModels)
      .split(",")
      .map((m) => m.trim())
      .filter(Boolean),
    sort: (sort || undefined) as RoutedRequest["sort"],
    sessionId: get(HEADERS.sessionId) || undefined,
    sealedKeyId: get(HEADERS.sealedKeyId) || undefined,
    maxTokens,
    prefix: tier === 4 ? undefined : readPrefix(get(HEADERS.prefix)),
    deadline: Number.isFinite(deadlineHeader) && deadlineHeader > 0 ? deadlineHeader : now + 60_000,
  };
}

function readPrefix(header: string): PromptPrefix | undefined {
  return header === "" ? undefined : decodePromptPrefix(header);
}
