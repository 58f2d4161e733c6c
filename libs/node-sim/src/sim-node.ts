import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { createConcurrencyGate } from "./concurrency-gate.ts";
import { createControlRoutes } from "./control-routes.ts";
import { createFaultSlot } from "./fault-slot.ts";
import type { GenerationContext } from "./generation.ts";
import { asHttp1 } from "./http-reply.ts";
import { createInferenceRoute } from "./inference-routes.ts";
import { createEngine, REAL_ENGINE_CLOCK } from "./engine/engine.ts";
import type { Engine } from "./engine/engine.ts";
import { createEngineMetrics } from "./engine/engine-metrics.ts";
import { createSimMetrics } from "./metrics.ts";
import type { SimMetrics } from "./metrics.ts";
import { createModelRoutes } from "./model-routes.ts";
import { checkOptions, engineSettings, initialConfig } from "./node-options.ts";
import { createNodeServer } from "./node-server.ts";
import { createVocabulary, DEFAULT_VOCABULARY } from "./openai-response.ts";
import { createProbeRoutes } from "./probe-routes.ts";
import { createQuoteRoute } from "./quote-routes.ts";
import { createRequestLedger } from "./request-ledger.ts";
import { createRouter } from "./router.ts";
import { createTeeQuoter } from "./tee.ts";
import { createTlsIdentity, tlsIdentityOf } from "./tls-identity.ts";
import type { TlsIdentity } from "./tls-identity.ts";
import type {
  SimEngineStats,
  SimFault,
  SimNode,
  SimNodeOptions,
  SimProtocol,
  SimRuntimeConfig,
} from "./types.ts";
import { parseSimConfigPatch, parseSimFault, SimInputError } from "./validate.ts";

/**
 * Starts a simulated vLLM or TGI node on `host:port` (port 0: a free one) and resolves once
 * it listens. It serves the OpenAI-compatible inference API, `/health`, `/metrics` and the
 * `/_sim/*` control API described in the README.
 *
 * @throws {SimInputError} with code `invalid_options` for bad options; rejects with the
 *   listen error (e.g. `EADDRINUSE`) when the port is taken.
 */
export async function startSimNode(options: SimNodeOptions): Promise<SimNode> {
  checkOptions(options);
  const config = initialConfig(options);
  const { nodeId, flavour } = options;
  const instanceId = options.instanceId ?? randomUUID();
  const protocol = options.protocol ?? "http1";
  const quoter = options.tee === undefined ? undefined : createTeeQuoter(options.tee);
  const tdIdentity = tlsIdentityFor(options, protocol);

  const faults = createFaultSlot();
  const gate = createConcurrencyGate(config.maxConcurrency);
  const modelName = options.models[0] ?? "";
  const { engine, metrics } = engineAndMetrics(options, config, modelName, instanceId);
  // The handlers below reach `nodeServer` (made last, from them) only while serving.
  const ledger = createRequestLedger({
    nodeId,
    instanceId,
    load: () => engine?.counters() ?? gate,
    engine: () => (engine === undefined ? undefined : engineStats(engine)),
    quotesServed: () => quoter?.served,
    servedTlsKey: () => nodeServer.servedIdentity()?.keySha256,
  });
  const generation: GenerationContext = {
    flavour,
    config,
    gate,
    engine,
    metrics,
    vocabulary: options.reply?.trim()
      ? createVocabulary(options.reply.split(" ").filter(Boolean))
      : DEFAULT_VOCABULARY,
    batchTokens: 0,
    closing: false,
    onCompleted: () => ledger.completed(),
  };

  function configure(patch: Partial<SimRuntimeConfig>): void {
    const checked = parseSimConfigPatch(patch);
    Object.assign(config, checked);
    if (checked.maxConcurrency !== undefined) {
      gate.setLimit(checked.maxConcurrency);
      engine?.setMaxRunning(checked.maxConcurrency);
    }
  }

  function resetPrefixCache(): void {
    if (engine === undefined) {
      throw new SimInputError("invalid_config", "this node runs no engine model", "engine");
    }
    engine.resetPrefixCache();
  }

  function setFault(fault: SimFault | null): void {
    if (fault?.kind === "key_swap") nodeServer.swapKey();
    else faults.set(fault);
  }

  const route = createRouter({
    inference: createInferenceRoute({
      nodeId,
      models: new Set(options.models),
      faults,
      ledger,
      generation,
      tlsKeyOf: (req) => nodeServer.tlsKeyOf(req),
    }),
    probes: createProbeRoutes(faults, generation),
    models: createModelRoutes(flavour, options.models),
    quote: createQuoteRoute(faults, quoter, tdIdentity),
    control: createControlRoutes({ faults, setFault, config, configure, ledger }),
    resetPrefixCache: engine === undefined ? undefined : resetPrefixCache,
  });

  const handler = (
    request: IncomingMessage | Http2ServerRequest,
    response: ServerResponse | Http2ServerResponse,
  ) => {
    const [req, res] = asHttp1(request, response);
    res.setHeader("x-sim-node", nodeId);
    if (nodeServer.openedBeforeKeySwap(req)) res.setHeader("connection", "close");
    route(req, res);
  };
  const nodeServer = createNodeServer(nodeId, protocol, tdIdentity, handler);
  const { url, port } = await nodeServer.listen(options.port ?? 0, options.host ?? "127.0.0.1");

  let closed: Promise<void> | undefined;
  function close(): Promise<void> {
    if (closed === undefined) {
      generation.closing = true;
      gate.clear();
      closed = nodeServer.close();
    }
    return closed;
  }

  return {
    url,
    port,
    nodeId,
    instanceId,
    stats: () => ledger.stats(),
    fault: () => faults.current(),
    setFault(fault) {
      setFault(fault === null ? null : parseSimFault(fault));
    },
    configure,
    resetStats: () => ledger.reset(),
    resetPrefixCache,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * The key a node presents: the given certificate's, or a fresh one for TLS and TEE nodes.
 * In TEE mode it is made inside the TD; the quotes bind it even after a key swap.
 */
function tlsIdentityFor(options: SimNodeOptions, protocol: SimProtocol): TlsIdentity | undefined {
  if (options.certificate !== undefined) {
    return tlsIdentityOf(options.certificate.keyPem, options.certificate.certPem);
  }
  const tls = options.tee !== undefined || options.tls === true || protocol === "h2";
  return tls ? createTlsIdentity(options.nodeId) : undefined;
}

/** The engine model and its metrics, or the flavour's plain metrics without engine. */
function engineAndMetrics(
  options: SimNodeOptions,
  config: SimRuntimeConfig,
  modelName: string,
  instanceId: string,
): { engine: Engine | undefined; metrics: SimMetrics } {
  const settings = engineSettings(options, config);
  if (settings === undefined) {
    return { engine: undefined, metrics: createSimMetrics(options.flavour, modelName, instanceId) };
  }
  const metrics = createEngineMetrics({ modelName, instanceId, settings });
  return { engine: createEngine(settings, REAL_ENGINE_CLOCK, metrics), metrics };
}

function engineStats(engine: Engine): SimEngineStats {
  const c = engine.counters();
  return {
    kv_cache_blocks: engine.settings.kvCacheBlocks,
    cached_blocks: c.cachedBlocks,
    kv_cache_usage: c.kvCacheUsage,
    prefix_cache_queries: c.prefixCacheQueries,
    prefix_cache_hits: c.prefixCacheHits,
    prompt_tokens: c.promptTokens,
    generation_tokens: c.generationTokens,
  };
}
