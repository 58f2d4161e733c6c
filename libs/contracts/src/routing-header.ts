/**
 * The `x-zml-routing` header: an RFC 8941 structured-field dictionary such as
 * `decision-id="01J…", node="h100-a", policy="balanced", family="H100", queue-depth=2,
 * tier=1, attempts=1`. Read and written through `structured-headers` (the HTTP WG's test
 * suite, RFC 8941 and 9651). Only strings, integers and a boolean are sent; the reader takes
 * any dictionary, and skips parameters and members a later gateway may add.
 *
 * Plain code besides that library, so the SDK can bundle it (`@zml/contracts/routing-header`).
 * The Python SDK reads the header with a parser of its own; both are held to the vectors in
 * `test/routing-header-vectors.json`.
 */

import { isInnerList, parseDictionary, serializeDictionary, Token } from "structured-headers";
import type { BareItem, Dictionary, InnerList, Item } from "structured-headers";

export interface RoutingInfo {
  decisionId: string;
  node: string;
  policy: string;
  family: string;
  queueDepth: number;
  tier: number;
  attempts: number;
  /**
   * The price the decision ranked the node on: `spot`, `on_prem`, `fallback` (the node's
   * configured rate, because its spot price aged out or none came yet) or `none` (ranked at
   * the highest known price). Absent from answers of gateways that predate it.
   */
  price?: string | undefined;
  /** Seconds since that spot price was last confirmed (0 for prices that do not age). */
  priceAgeS?: number | undefined;
  /** Whether a spot price existed but was past its age limit. */
  priceStale?: boolean | undefined;
  /**
   * Prompt tokens the chosen node was expected to hold in its prefix cache (prefix-affinity
   * routing); absent when prefix affinity did not apply to the request.
   */
  cachedTokens?: number | undefined;
}

const KEYS: Record<keyof RoutingInfo, string> = {
  decisionId: "decision-id",
  node: "node",
  policy: "policy",
  family: "family",
  queueDepth: "queue-depth",
  tier: "tier",
  attempts: "attempts",
  price: "price",
  priceAgeS: "price-age-s",
  priceStale: "price-stale",
  cachedTokens: "cached-tokens",
};

/**
 * RFC 8941 strings hold printable ASCII only: anything else (a CR, LF or any non-ASCII
 * character) becomes `?`, so a name can never break the header or fail to serialise.
 */
function sfString(value: string): string {
  return value.replace(/[^\x20-\x7e]/gu, "?");
}

function sfInteger(value: number): number {
  if (!Number.isSafeInteger(value) || Math.abs(value) > 999_999_999_999_999) {
    throw new RangeError(`not an RFC 8941 integer: ${value}`);
  }
  return value;
}

export function serializeRoutingHeader(info: RoutingInfo): string {
  const members: Record<string, BareItem> = {
    [KEYS.decisionId]: sfString(info.decisionId),
    [KEYS.node]: sfString(info.node),
    [KEYS.policy]: sfString(info.policy),
    [KEYS.family]: sfString(info.family),
    [KEYS.queueDepth]: sfInteger(info.queueDepth),
    [KEYS.tier]: sfInteger(info.tier),
    [KEYS.attempts]: sfInteger(info.attempts),
  };
  if (info.price !== undefined) members[KEYS.price] = sfString(info.price);
  if (info.priceAgeS !== undefined) members[KEYS.priceAgeS] = sfInteger(info.priceAgeS);
  // `?0` is a member with a value: the library writes a bare key only for `true`.
  if (info.priceStale !== undefined) members[KEYS.priceStale] = info.priceStale;
  if (info.cachedTokens !== undefined) members[KEYS.cachedTokens] = sfInteger(info.cachedTokens);
  return serializeDictionary(members);
}

/** Thrown for a header that is no RFC 8941 dictionary, or lacks a routing member. */
export class StructuredFieldParseError extends Error {
  readonly code = "structured_field_parse_error";
  constructor(message: string) {
    super(message);
    this.name = "StructuredFieldParseError";
  }
}

type SfValue = string | number | boolean;

/** A dictionary, or {@link StructuredFieldParseError} with the library's reason. */
function dictionaryOf(input: string): Dictionary {
  try {
    return parseDictionary(input);
  } catch (error) {
    throw new StructuredFieldParseError(
      `not an RFC 8941 dictionary: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

/**
 * A member's value as the routing header uses it: a string (or token), an integer, or a
 * boolean; `undefined` for anything else (a decimal, byte sequence, date, display string or
 * inner list). Parameters are skipped. A decimal with a zero fraction (`1.0`) reads as the
 * integer: a JavaScript number cannot tell them apart, and the library says so.
 */
function valueOf(member: Item | InnerList): SfValue | undefined {
  if (isInnerList(member)) return undefined;
  // `unknown`: the library's BareItem names the DOM's BufferSource, which Node's types lack.
  const value: unknown = member[0];
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isInteger(value) ? value : undefined;
  if (value instanceof Token) return value.toString();
  return undefined;
}

/**
 * Parses an RFC 8941 dictionary of bare items: strings, tokens (as strings), integers and
 * booleans. Refuses what the routing header never holds: parameters, inner lists, decimals
 * and other types.
 */
export function parseSfDictionary(input: string): Map<string, SfValue> {
  const out = new Map<string, SfValue>();
  for (const [key, member] of dictionaryOf(input)) {
    if (!isInnerList(member) && member[1].size > 0) {
      throw new StructuredFieldParseError(`parameters are not supported (${key})`);
    }
    const value = valueOf(member);
    if (value === undefined) throw new StructuredFieldParseError(`unsupported value (${key})`);
    out.set(key, value);
  }
  return out;
}

/**
 * Parses an `x-zml-routing` header; throws {@link StructuredFieldParseError} when it is
 * malformed or lacks a member. Parameters, and members a later gateway may add, are skipped.
 */
export function parseRoutingHeader(header: string): RoutingInfo {
  const dict = dictionaryOf(header);
  const value = (k: string) => {
    const member = dict.get(k);
    return member === undefined ? undefined : valueOf(member);
  };
  const str = (k: string): string => {
    const v = value(k);
    if (typeof v !== "string") throw new StructuredFieldParseError(`missing string ${k}`);
    return v;
  };
  const int = (k: string): number => {
    const v = value(k);
    if (typeof v !== "number") throw new StructuredFieldParseError(`missing integer ${k}`);
    return v;
  };
  const price = value(KEYS.price);
  const age = value(KEYS.priceAgeS);
  const stale = value(KEYS.priceStale);
  const cached = value(KEYS.cachedTokens);
  return {
    decisionId: str(KEYS.decisionId),
    node: str(KEYS.node),
    policy: str(KEYS.policy),
    family: str(KEYS.family),
    queueDepth: int(KEYS.queueDepth),
    tier: int(KEYS.tier),
    attempts: int(KEYS.attempts),
    ...(typeof price === "string" ? { price } : {}),
    ...(typeof age === "number" ? { priceAgeS: age } : {}),
    ...(typeof stale === "boolean" ? { priceStale: stale } : {}),
    ...(typeof cached === "number" ? { cachedTokens: cached } : {}),
  };
}
