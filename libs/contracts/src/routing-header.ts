/**
 * The `x-zml-routing` header: an RFC 8941 structured-field dictionary such as
 * `decision-id="01J…", node="h100-a", policy="balanced", family="H100", queue-depth=2,
 * tier=1, attempts=1`. Only strings and integers are produced; the parser also accepts
 * tokens and booleans but rejects parameters and inner lists, which we never send.
 */

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

/** Printable ASCII except `"` and backslash: what an RFC 8941 string holds unescaped. */
const PLAIN_SF_STRING = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

function sfString(value: string): string {
  // Ids, names and families are nearly always plain: no per-character walk for them.
  if (PLAIN_SF_STRING.test(value)) return `"${value}"`;
  // RFC 8941 strings allow printable ASCII only; anything else cannot be sent faithfully.
  let out = '"';
  for (const ch of value) {
    const code = ch.charCodeAt(0);
    if (ch === '"' || ch === "\\") out += `\\${ch}`;
    else if (code >= 0x20 && code <= 0x7e && ch.length === 1) out += ch;
    else out += "?";
  }
  return `${out}"`;
}

function sfInteger(value: number): string {
  if (!Number.isSafeInteger(value) || Math.abs(value) > 999_999_999_999_999) {
    throw new RangeError(`not an RFC 8941 integer: ${value}`);
  }
  return String(value);
}

export function serializeRoutingHeader(info: RoutingInfo): string {
  return [
    `${KEYS.decisionId}=${sfString(info.decisionId)}`,
    `${KEYS.node}=${sfString(info.node)}`,
    `${KEYS.policy}=${sfString(info.policy)}`,
    `${KEYS.family}=${sfString(info.family)}`,
    `${KEYS.queueDepth}=${sfInteger(info.queueDepth)}`,
    `${KEYS.tier}=${sfInteger(info.tier)}`,
    `${KEYS.attempts}=${sfInteger(info.attempts)}`,
    ...(info.price === undefined ? [] : [`${KEYS.price}=${sfString(info.price)}`]),
    ...(info.priceAgeS === undefined ? [] : [`${KEYS.priceAgeS}=${sfInteger(info.priceAgeS)}`]),
    ...(info.priceStale === undefined ? [] : [`${KEYS.priceStale}=?${info.priceStale ? 1 : 0}`]),
    ...(info.cachedTokens === undefined
      ? []
      : [`${KEYS.cachedTokens}=${sfInteger(info.cachedTokens)}`]),
  ].join(", ");
}

export class StructuredFieldParseError extends Error {
  readonly code = "structured_field_parse_error";
  constructor(message: string) {
    super(message);
    this.name = "StructuredFieldParseError";
  }
}

type SfValue = string | number | boolean;

/** Parses an RFC 8941 dictionary of bare items (no parameters, no inner lists). */
export function parseSfDictionary(input: string): Map<string, SfValue> {
  const out = new Map<string, SfValue>();
  let i = 0;
  const fail = (why: string): never => {
    throw new StructuredFieldParseError(`${why} at offset ${i}`);
  };
  const skipOws = () => {
    while (input[i] === " " || input[i] === "\t") i++;
  };
  while (input[i] === " ") i++;
  while (i < input.length) {
    const keyMatch = /^[a-z*][a-z0-9_\-.*]*/.exec(input.slice(i));
    if (!keyMatch) fail("expected a key");
    const key = keyMatch![0];
    i += key.length;
    let value: SfValue = true;
    if (input[i] === "=") {
      i++;
      const ch = input[i];
      if (ch === '"') {
        i++;
        let s = "";
        for (;;) {
          if (i >= input.length) fail("unterminated string");
          const c = input[i++]!;
          if (c === "\\") {
            const next = input[i++];
            if (next !== '"' && next !== "\\") fail("bad escape");
            s += next;
          } else if (c === '"') break;
          else if (c < " " || c > "~") fail("non-printable character in string");
          else s += c;
        }
        value = s;
      } else if (ch === "?") {
        const b = input[i + 1];
        if (b !== "0" && b !== "1") fail("bad boolean");
        value = b === "1";
        i += 2;
      } else {
        const num = /^-?\d{1,15}(?![.\d])/.exec(input.slice(i));
        const tok = /^[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*/.exec(input.slice(i));
        if (num) {
          value = Number(num[0]);
          i += num[0].length;
        } else if (tok) {
          value = tok[0];
          i += tok[0].length;
        } else fail("unsupported value");
      }
    }
    if (input[i] === ";") fail("parameters are not supported");
    out.set(key, value);
    skipOws();
    if (i >= input.length) break;
    if (input[i] !== ",") fail("expected ','");
    i++;
    skipOws();
    if (i >= input.length) fail("trailing comma");
  }
  return out;
}

/** Parses an `x-zml-routing` header; throws {@link StructuredFieldParseError} when malformed. */
export function parseRoutingHeader(header: string): RoutingInfo {
  const dict = parseSfDictionary(header);
  const str = (k: string): string => {
    const v = dict.get(k);
    if (typeof v !== "string") throw new StructuredFieldParseError(`missing string ${k}`);
    return v;
  };
  const int = (k: string): number => {
    const v = dict.get(k);
    if (typeof v !== "number") throw new StructuredFieldParseError(`missing integer ${k}`);
    return v;
  };
  return {
    decisionId: str(KEYS.decisionId),
    node: str(KEYS.node),
    policy: str(KEYS.policy),
    family: str(KEYS.family),
    queueDepth: int(KEYS.queueDepth),
    tier: int(KEYS.tier),
    attempts: int(KEYS.attempts),
    ...optional(dict),
  };
}

function optional(dict: Map<string, SfValue>): Partial<RoutingInfo> {
  const price = dict.get(KEYS.price);
  const age = dict.get(KEYS.priceAgeS);
  const stale = dict.get(KEYS.priceStale);
  const cached = dict.get(KEYS.cachedTokens);
  return {
    ...(typeof price === "string" ? { price } : {}),
    ...(typeof age === "number" ? { priceAgeS: age } : {}),
    ...(typeof stale === "boolean" ? { priceStale: stale } : {}),
    ...(typeof cached === "number" ? { cachedTokens: cached } : {}),
  };
}
