import type { SimFault, SimRuntimeConfig } from "./types.ts";

/**
 * Bad input to the control API or the programmatic one. `field` names the offending field as
 * a dotted path (`fault.afterChunks`), `code` is stable for tests and scripts.
 */
export class SimInputError extends Error {
  readonly code: "invalid_fault" | "invalid_config" | "invalid_options";
  readonly field: string | null;
  constructor(code: SimInputError["code"], message: string, field: string | null) {
    super(message);
    this.name = "SimInputError";
    this.code = code;
    this.field = field;
  }
}

type Code = SimInputError["code"];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function rejectUnknownKeys(
  code: Code,
  prefix: string,
  input: Record<string, unknown>,
  allowed: readonly string[],
): void {
  for (const key of Object.keys(input)) {
    if (!allowed.includes(key)) {
      throw new SimInputError(
        code,
        `${prefix}.${key}: unknown field (allowed: ${allowed.join(", ")})`,
        `${prefix}.${key}`,
      );
    }
  }
}

interface NumberRule {
  integer: boolean;
  min: number;
  max: number;
}

function readNumber(
  code: Code,
  prefix: string,
  input: Record<string, unknown>,
  key: string,
  rule: NumberRule,
): number {
  const value = input[key];
  const field = `${prefix}.${key}`;
  const ok =
    typeof value === "number" &&
    Number.isFinite(value) &&
    (!rule.integer || Number.isInteger(value)) &&
    value >= rule.min &&
    value <= rule.max;
  if (!ok) {
    const what = rule.integer ? "an integer" : "a number";
    throw new SimInputError(
      code,
      `${field}: expected ${what} from ${rule.min} to ${rule.max}, got ${JSON.stringify(value) ?? "nothing"}`,
      field,
    );
  }
  return value;
}

function readOptionalNumber(
  code: Code,
  prefix: string,
  input: Record<string, unknown>,
  key: string,
  rule: NumberRule,
): number | undefined {
  return input[key] === undefined ? undefined : readNumber(code, prefix, input, key, rule);
}

const TIMES: NumberRule = { integer: true, min: 1, max: 1_000_000_000 };
const CHUNKS: NumberRule = { integer: true, min: 0, max: 1_000_000_000 };
const DELAY_MS: NumberRule = { integer: false, min: 0, max: 3_600_000 };
const STATUS: NumberRule = { integer: true, min: 400, max: 599 };
const RETRY_AFTER_S: NumberRule = { integer: true, min: 0, max: 86_400 };

const FAULT_FIELDS = {
  status: ["kind", "status", "retryAfterS", "times"],
  reset: ["kind", "times"],
  hang: ["kind", "times"],
  slow_first_token: ["kind", "delayMs", "times"],
  cut_stream: ["kind", "afterChunks", "times"],
  stall_stream: ["kind", "afterChunks", "times"],
  malformed_chunk: ["kind", "afterChunks", "times"],
  health_fail: ["kind", "times"],
  relay: ["kind", "target", "times"],
  key_swap: ["kind"],
} as const satisfies Record<SimFault["kind"], readonly string[]>;

/** Fault kinds accepted by {@link parseSimFault}. */
export const SIM_FAULT_KINDS = Object.keys(FAULT_FIELDS) as SimFault["kind"][];

function isFaultKind(kind: unknown): kind is SimFault["kind"] {
  return typeof kind === "string" && Object.hasOwn(FAULT_FIELDS, kind);
}

/**
 * Checks an untrusted value (a control request body, a value from JavaScript) and returns a
 * fresh, well-typed fault. Unknown fields are rejected so a typo (`after_chunks`) does not
 * silently become a different fault.
 *
 * @throws {SimInputError} with code `invalid_fault` and the offending field.
 */
export function parseSimFault(input: unknown): SimFault {
  const p = "fault";
  const c: Code = "invalid_fault";
  if (!isRecord(input)) throw new SimInputError(c, "fault: expected a JSON object", p);
  const kind = input["kind"];
  if (!isFaultKind(kind)) {
    throw new SimInputError(
      c,
      `fault.kind: expected one of ${SIM_FAULT_KINDS.join(", ")}, got ${JSON.stringify(kind) ?? "nothing"}`,
      "fault.kind",
    );
  }
  rejectUnknownKeys(c, p, input, FAULT_FIELDS[kind]);
  const times = readOptionalNumber(c, p, input, "times", TIMES);
  const withTimes = <T extends SimFault>(fault: T): T =>
    times === undefined ? fault : { ...fault, times };
  switch (kind) {
    case "status": {
      const retryAfterS = readOptionalNumber(c, p, input, "retryAfterS", RETRY_AFTER_S);
      const status = readNumber(c, p, input, "status", STATUS);
      return withTimes(
        retryAfterS === undefined ? { kind, status } : { kind, status, retryAfterS },
      );
    }
    case "slow_first_token":
      return withTimes({ kind, delayMs: readNumber(c, p, input, "delayMs", DELAY_MS) });
    case "cut_stream":
    case "stall_stream":
    case "malformed_chunk":
      return withTimes({ kind, afterChunks: readNumber(c, p, input, "afterChunks", CHUNKS) });
    case "reset":
    case "hang":
    case "health_fail":
      return withTimes({ kind });
    case "relay":
      return withTimes({ kind, target: readHttpUrl(c, p, input, "target") });
    case "key_swap":
      return { kind };
  }
}

function readHttpUrl(
  code: Code,
  prefix: string,
  input: Record<string, unknown>,
  key: string,
): string {
  const value = input[key];
  const field = `${prefix}.${key}`;
  let url: URL | undefined;
  try {
    url = typeof value === "string" ? new URL(value) : undefined;
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new SimInputError(code, `${field}: expected an http(s) URL`, field);
  }
  return value as string;
}

const CONFIG_RULES = {
  ttftMs: { integer: false, min: 0, max: 3_600_000 },
  tokensPerSecond: { integer: false, min: 0, max: 1_000_000 },
  maxConcurrency: { integer: true, min: 1, max: 100_000 },
  completionTokens: { integer: true, min: 1, max: 1_000_000 },
} as const satisfies Record<keyof SimRuntimeConfig, NumberRule>;

const CONFIG_KEYS = Object.keys(CONFIG_RULES) as (keyof SimRuntimeConfig)[];

/**
 * Checks a run-time settings patch. Every field is optional; unknown fields are rejected.
 *
 * @throws {SimInputError} with code `invalid_config` (or `code` when given) and the field.
 */
export function parseSimConfigPatch(
  input: unknown,
  prefix = "config",
  code: Code = "invalid_config",
): Partial<SimRuntimeConfig> {
  if (!isRecord(input)) throw new SimInputError(code, `${prefix}: expected a JSON object`, prefix);
  rejectUnknownKeys(code, prefix, input, CONFIG_KEYS);
  const patch: Partial<SimRuntimeConfig> = {};
  for (const key of CONFIG_KEYS) {
    const value = readOptionalNumber(code, prefix, input, key, CONFIG_RULES[key]);
    if (value !== undefined) patch[key] = value;
  }
  return patch;
}
