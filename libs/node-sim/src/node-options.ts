import { checkTeeOptions } from "./tee.ts";
import { SIM_FLAVOURS, SIM_PROTOCOLS } from "./types.ts";
import type { EngineSettings } from "./engine/engine.ts";
import type { SimNodeOptions, SimRuntimeConfig } from "./types.ts";
import { parseSimConfigPatch, SimInputError } from "./validate.ts";

const DEFAULTS: SimRuntimeConfig = {
  ttftMs: 0,
  tokensPerSecond: 0,
  maxConcurrency: 8,
  completionTokens: 16,
};

/**
 * Checks the options of `startSimNode` before anything starts.
 *
 * @throws {SimInputError} with code `invalid_options`, naming the first bad field.
 */
export function checkOptions(options: SimNodeOptions): void {
  const fail = (field: string, message: string): never => {
    throw new SimInputError("invalid_options", `options.${field}: ${message}`, `options.${field}`);
  };
  if (typeof options.nodeId !== "string" || options.nodeId.length === 0) {
    fail("nodeId", "expected a non-empty string");
  }
  if (!SIM_FLAVOURS.includes(options.flavour)) {
    fail("flavour", `expected one of ${SIM_FLAVOURS.join(", ")}`);
  }
  if (
    !Array.isArray(options.models) ||
    options.models.length === 0 ||
    !options.models.every((m) => typeof m === "string" && m.length > 0)
  ) {
    fail("models", "expected at least one non-empty model id");
  }
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    fail("port", "expected an integer from 0 to 65535");
  }
  if (options.instanceId !== undefined && options.instanceId.length === 0) {
    fail("instanceId", "expected a non-empty string");
  }
  if (options.tee !== undefined) checkTeeOptions(options.tee);
  if (options.engine !== undefined) checkEngineOptions(options, fail);
  const protocol = options.protocol ?? "http1";
  if (!SIM_PROTOCOLS.includes(protocol)) {
    fail("protocol", `expected one of ${SIM_PROTOCOLS.join(", ")}`);
  }
  if (protocol === "h2c" && (options.tee !== undefined || options.tls === true)) {
    fail("protocol", "h2c is HTTP/2 without TLS; TLS and TEE nodes speak http1 or h2");
  }
  const certificate = options.certificate;
  if (certificate !== undefined) {
    if (options.tee !== undefined) fail("certificate", "a TEE node makes its own key");
    if (protocol !== "h2" && options.tls !== true) {
      fail("certificate", "only a TLS node (tls or protocol h2) presents a certificate");
    }
    if (typeof certificate.keyPem !== "string" || typeof certificate.certPem !== "string") {
      fail("certificate", "expected keyPem and certPem as PEM strings");
    }
  }
}

/** The run-time settings a node starts with: the defaults, overridden by `options`. */
export function initialConfig(options: SimNodeOptions): SimRuntimeConfig {
  const initial = parseSimConfigPatch(
    {
      ...(options.ttftMs === undefined ? {} : { ttftMs: options.ttftMs }),
      ...(options.tokensPerSecond === undefined
        ? {}
        : { tokensPerSecond: options.tokensPerSecond }),
      ...(options.maxConcurrency === undefined ? {} : { maxConcurrency: options.maxConcurrency }),
      ...(options.completionTokens === undefined
        ? {}
        : { completionTokens: options.completionTokens }),
    },
    "options",
    "invalid_options",
  );
  return { ...DEFAULTS, ...initial };
}

const ENGINE_DEFAULTS = {
  kvCacheBlocks: 4096,
  prefillTokensPerSecond: 16_000,
  stepBaseMs: 8,
  stepPerSequenceMs: 0.25,
} as const;

function checkEngineOptions(
  options: SimNodeOptions,
  fail: (field: string, message: string) => never,
): void {
  const engine = options.engine;
  if (typeof engine !== "object" || engine === null) fail("engine", "expected an object");
  if (options.flavour !== "vllm") fail("engine", "the engine model imitates vLLM: flavour vllm");
  const allowed = Object.keys(ENGINE_DEFAULTS);
  for (const key of Object.keys(engine ?? {})) {
    if (!allowed.includes(key))
      fail(`engine.${key}`, `unknown field (allowed: ${allowed.join(", ")})`);
  }
  const blocks = engine?.kvCacheBlocks;
  if (blocks !== undefined && (!Number.isInteger(blocks) || blocks < 1 || blocks > 1e8)) {
    fail("engine.kvCacheBlocks", "expected an integer from 1 to 100000000");
  }
  const rate = engine?.prefillTokensPerSecond;
  if (rate !== undefined && (!Number.isFinite(rate) || rate <= 0)) {
    fail("engine.prefillTokensPerSecond", "expected a positive number");
  }
  for (const key of ["stepBaseMs", "stepPerSequenceMs"] as const) {
    const value = engine?.[key];
    if (value !== undefined && (!Number.isFinite(value) || value < 0 || value > 60_000)) {
      fail(`engine.${key}`, "expected a number from 0 to 60000");
    }
  }
}

/** The engine settings a node starts with, or undefined for a node without engine model. */
export function engineSettings(
  options: SimNodeOptions,
  config: SimRuntimeConfig,
): EngineSettings | undefined {
  if (options.engine === undefined) return undefined;
  return { ...ENGINE_DEFAULTS, ...options.engine, maxRunning: config.maxConcurrency };
}
