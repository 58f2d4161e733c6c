/**
 * The `x-zml-routing` header, read on the client side. It is an RFC 8941 dictionary, e.g.
 * `decision-id="01J…", node="h100-a", policy="balanced", family="H100", queue-depth=2,
 * tier=1, attempts=1`, read by the gateway's own parser (`@zml/contracts/routing-header`,
 * bundled into the SDK with the RFC 8941 library it uses, so the SDK has no dependencies).
 * Parameters and members the gateway may add later are skipped, not refused. The types here
 * are the SDK's own, so its declarations name no package a user does not have.
 */

import { parseRoutingHeader as parseHeader } from "@zml/contracts/routing-header";

export const ROUTING_HEADER = "x-zml-routing";

/** How the gateway routed one request. */
export interface RoutingInfo {
  /** The routing decision's id: find its trace by it. */
  decisionId: string;
  /** The node that received the payload. */
  node: string;
  /** The routing policy applied. */
  policy: string;
  /** The node's accelerator family, e.g. `H100`. */
  family: string;
  /** The node's queue depth when the request was dispatched. */
  queueDepth: number;
  /** The trust tier the request ran at (1–4). */
  tier: number;
  /** Dispatch attempts (at most 3, retries and fallbacks together). */
  attempts: number;
  /**
   * The price the node was ranked on: `spot`, `on_prem`, `fallback` (its configured rate:
   * the spot price aged out or none came yet) or `none`. Absent from older gateways.
   */
  price?: string | undefined;
  /** Seconds since that spot price was last confirmed (0 for prices that do not age). */
  priceAgeS?: number | undefined;
  /** A spot price existed but was past its age limit. */
  priceStale?: boolean | undefined;
  /** Prompt tokens the node was expected to hold in its prefix cache, when that applied. */
  cachedTokens?: number | undefined;
}

/** Thrown by {@link parseRoutingHeader} for a header that is malformed or incomplete. */
export class RoutingHeaderError extends Error {
  readonly code = "invalid_routing_header";
  constructor(message: string) {
    super(message);
    this.name = "RoutingHeaderError";
  }
}

/** Parses an `x-zml-routing` header; throws {@link RoutingHeaderError} when malformed. */
export function parseRoutingHeader(header: string): RoutingInfo {
  try {
    return parseHeader(header);
  } catch (error) {
    throw new RoutingHeaderError(`${ROUTING_HEADER}: ${(error as Error).message}`);
  }
}
