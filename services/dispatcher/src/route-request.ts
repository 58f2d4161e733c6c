import { HEADERS, MESSAGE_TYPES, ZmlError } from "@zml/contracts";
import type { MsgHdrs } from "@zml/bus";

/** The routing fields intake extracted from the client's body, read back from headers. */
export interface RouteRequest {
  requestId: string;
  model: string;
  path: string;
  stream: boolean;
  tier: number;
  /** The policy intake resolved, when it resolved to a registered one. */
  policy: string | undefined;
  account: string;
  acceleratorHint: string | undefined;
  /** Models to fall back to, in order, after `model`. */
  fallbackModels: string[];
  sort: "quality" | "price" | "latency" | undefined;
  sessionId: string | undefined;
  /** Epoch ms after which the client no longer waits. */
  deadline: number;
}

/**
 * Reads the routing headers of a `route.request` message or a batch job (same headers,
 * another message type); throws ZmlError naming the bad header.
 */
export function readRouteRequest(
  h: MsgHdrs | undefined,
  now: number,
  expectedType: string = MESSAGE_TYPES.routeRequestV1,
): RouteRequest {
  const get = (name: string) => h?.get(name) ?? "";
  const type = get(HEADERS.type);
  if (type !== expectedType) {
    throw new ZmlError("invalid_request", `unsupported message type '${type}'`, HEADERS.type);
  }
  const model = get(HEADERS.model);
  if (!model) throw new ZmlError("invalid_request", "model header missing", HEADERS.model);
  const path = get(HEADERS.path);
  if (!path.startsWith("/v1/")) {
    throw new ZmlError("invalid_request", "path header missing or invalid", HEADERS.path);
  }
  const tier = Number(get(HEADERS.tier) || "1");
  if (!Number.isInteger(tier) || tier < 1 || tier > 4) {
    throw new ZmlError("invalid_request", "tier must be 1-4", HEADERS.tier);
  }
  const deadlineHeader = Number(get(HEADERS.deadline));
  const sort = get(HEADERS.sort);
  if (sort && sort !== "quality" && sort !== "price" && sort !== "latency") {
    throw new ZmlError(
      "invalid_request",
      "provider.sort must be quality, price or latency",
      HEADERS.sort,
    );
  }
  return {
    requestId: get(HEADERS.requestId),
    model,
    path,
    stream: get(HEADERS.stream) === "1",
    tier,
    policy: get(HEADERS.policy) || undefined,
    account: get(HEADERS.account),
    acceleratorHint: get(HEADERS.acceleratorHint) || undefined,
    fallbackModels: get(HEADERS.fallbackModels)
      .split(",")
      .map((m) => m.trim())
      .filter(Boolean),
    sort: (sort || undefined) as RouteRequest["sort"],
    sessionId: get(HEADERS.sessionId) || undefined,
    deadline: Number.isFinite(deadlineHeader) && deadlineHeader > 0 ? deadlineHeader : now + 60_000,
  };
}
