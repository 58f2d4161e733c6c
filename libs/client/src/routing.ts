/**
 * The `x-zml-routing` header, read on the client side. It is an RFC 8941 dictionary, e.g.
 * `decision-id="01J…", node="h100-a", policy="balanced", family="H100", queue-depth=2,
 * tier=1, attempts=1`. The SDK ships without dependencies, so it reads the header itself;
 * `test/routing.test.ts` holds it to the gateway's serializer in `@zml/contracts`.
 * Parameters and members the gateway may add later are skipped, not refused.
 */

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

type Member = string | number | boolean;

// One member: key, then `=value` (a quoted string, a number, a token, a boolean or a byte
// sequence), then any parameters. Values other than strings and integers are kept as text.
const MEMBER =
  /^([a-z*][a-z0-9_\-.*]*)(?:=("(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"|-?\d+(?:\.\d+)?|\?[01]|:[A-Za-z0-9+/=]*:|[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*))?((?:;[a-z*][a-z0-9_\-.*]*(?:=[^;,]*)?)*)/;

function valueOf(raw: string | undefined): Member {
  if (raw === undefined) return true;
  if (raw.startsWith('"')) return raw.slice(1, -1).replace(/\\(["\\])/g, "$1");
  if (/^-?\d{1,15}$/.test(raw)) return Number(raw);
  if (raw === "?1" || raw === "?0") return raw === "?1";
  return raw;
}

/** Reads an RFC 8941 dictionary of bare items; inner lists are not supported. */
export function parseDictionary(header: string): Map<string, Member> {
  const members = new Map<string, Member>();
  let rest = header.trim();
  while (rest.length > 0) {
    const m = MEMBER.exec(rest);
    if (!m) throw new RoutingHeaderError(`cannot read '${rest.slice(0, 40)}' in ${ROUTING_HEADER}`);
    members.set(m[1]!, valueOf(m[2]));
    rest = rest.slice(m[0].length).replace(/^[ \t]*/, "");
    if (rest.length === 0) break;
    if (!rest.startsWith(",")) throw new RoutingHeaderError(`expected ',' in ${ROUTING_HEADER}`);
    rest = rest.slice(1).replace(/^[ \t]*/, "");
    if (rest.length === 0) throw new RoutingHeaderError(`trailing ',' in ${ROUTING_HEADER}`);
  }
  return members;
}

/** Parses an `x-zml-routing` header; throws {@link RoutingHeaderError} when malformed. */
export function parseRoutingHeader(header: string): RoutingInfo {
  const members = parseDictionary(header);
  const text = (key: string) => {
    const v = members.get(key);
    if (typeof v !== "string") throw new RoutingHeaderError(`${ROUTING_HEADER}: no string ${key}`);
    return v;
  };
  const int = (key: string) => {
    const v = members.get(key);
    if (typeof v !== "number") throw new RoutingHeaderError(`${ROUTING_HEADER}: no integer ${key}`);
    return v;
  };
  return {
    decisionId: text("decision-id"),
    node: text("node"),
    policy: text("policy"),
    family: text("family"),
    queueDepth: int("queue-depth"),
    tier: int("tier"),
    attempts: int("attempts"),
    ...optionalMembers(members),
  };
}

function optionalMembers(members: Map<string, Member>): Partial<RoutingInfo> {
  const price = members.get("price");
  const age = members.get("price-age-s");
  const stale = members.get("price-stale");
  const cached = members.get("cached-tokens");
  return {
    ...(typeof price === "string" ? { price } : {}),
    ...(typeof age === "number" ? { priceAgeS: age } : {}),
    ...(typeof stale === "boolean" ? { priceStale: stale } : {}),
    ...(typeof cached === "number" ? { cachedTokens: cached } : {}),
  };
}
