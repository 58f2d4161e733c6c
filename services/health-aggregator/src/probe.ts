import { isTeeTier } from "@zml/contracts";
import type { NodeAddressPolicy, NodeSpec } from "@zml/contracts";
import { idleReading, MetricsReadError, readCustomHealth, readMetrics } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import { guardedConnector, NodeAddressRefusedError, systemResolver } from "@zml/runtime";
import type { HostResolver } from "@zml/runtime";
import { Agent } from "undici";
import type { Dispatcher } from "undici";
import { z } from "zod";

/** The real probe: HTTP through keep-alive agents, one for plain nodes, one for TEE nodes. */
export function createNodeProber(options: {
  keepAliveMs: number;
  timeoutMs: number;
  maxBodyBytes: number;
  /** Applied to every address probed, after DNS. */
  nodeAddresses: NodeAddressPolicy;
  /** Where node names are resolved; the system resolver unless a test fixes the answers. */
  resolveHost?: HostResolver;
}): {
  probe: (node: NodeSpec) => Promise<ProbeResult>;
  close: () => Promise<void>;
} {
  const resolve = options.resolveHost ?? systemResolver;
  const agent = new Agent({
    keepAliveTimeout: options.keepAliveMs,
    connections: 4,
    connect: guardedConnector(options.nodeAddresses, {}, resolve),
  });
  // Tier 3/4 nodes present a TLS key their quote vouches for, not a CA-issued certificate.
  // Health polls carry no payload, so they need not pin it (the dispatcher does); they only
  // must not refuse the certificate.
  const teeAgent = new Agent({
    keepAliveTimeout: options.keepAliveMs,
    connections: 4,
    connect: guardedConnector(options.nodeAddresses, { rejectUnauthorized: false }, resolve),
  });
  const limits = { timeoutMs: options.timeoutMs, maxBodyBytes: options.maxBodyBytes };
  return {
    probe: (node) => probeNode(isTeeTier(node.tier) ? teeAgent : agent, node, limits),
    close: async () => {
      await agent.close();
      await teeAgent.close();
    },
  };
}

/**
 * Probes one node: its health endpoint, then the engine's Prometheus metrics (vLLM, TGI,
 * llama.cpp, SGLang) and, for llama.cpp, its slots; custom servers answer the JSON health
 * format on their health path. Every failure becomes a failed ProbeResult whose reason an
 * operator can act on; nothing throws.
 */
export async function probeNode(
  agent: Dispatcher,
  node: NodeSpec,
  limits: { timeoutMs: number; maxBodyBytes: number },
): Promise<ProbeResult> {
  const { timeoutMs, maxBodyBytes } = limits;
  const signal = AbortSignal.timeout(timeoutMs);
  const get = (path: string) =>
    agent.request({
      origin: new URL(node.endpoint).origin,
      path: joinPath(node.endpoint, path),
      method: "GET",
      signal,
    });
  try {
    const health = await get(node.health_path);
    const healthText = await readCapped(health.body, maxBodyBytes, "health");
    if (health.statusCode !== 200) {
      return { ok: false, error: healthFailure(node, health.statusCode, healthText) };
    }
    if (node.framework === "custom") {
      const reading = readCustomHealth(JSON.parse(healthText));
      return reading.healthy
        ? { ok: true, reading }
        : { ok: false, error: "node reports itself unhealthy" };
    }
    // An OpenAI-compatible provider exposes no load metrics: its health answer is all a
    // probe learns, and the dispatcher's observations carry the rest of the signal.
    if (node.framework === "openai") return { ok: true, reading: idleReading() };
    const metrics = await get(node.metrics_path);
    const text = await readCapped(metrics.body, maxBodyBytes, "metrics");
    if (metrics.statusCode !== 200) {
      return { ok: false, error: metricsFailure(node, metrics.statusCode, text) };
    }
    const reading = readMetrics(node.framework, text);
    // What the engine serves and its slots refine the reading: a node that answers them
    // badly, slowly or not at all is judged on its health and metrics alone.
    const servedModels = await unlessFailing(engineModels(node.framework, get, maxBodyBytes));
    const slots =
      node.framework === "llamacpp" ? await unlessFailing(llamacppSlots(get, maxBodyBytes)) : null;
    return {
      ok: true,
      reading: {
        ...reading,
        servedModels,
        ...(slots === null ? {} : { slots: slots.count, kvCacheCapacityTokens: slots.tokens }),
      },
    };
  } catch (err) {
    // Only what the node's answer said is told; every failure below HTTP (refused, reset,
    // timed out, not HTTP at all) reads alike, or node registration becomes a port scanner
    // of the operator's network.
    // A refused address is said: it was judged before any connection, from what the name
    // resolves to, so it tells nothing about the ports behind it.
    if (
      err instanceof MetricsReadError ||
      err instanceof ProbeAnswerTooLarge ||
      err instanceof NodeAddressRefusedError
    ) {
      return { ok: false, error: err.message };
    }
    if (err instanceof SyntaxError) return { ok: false, error: "health answer is not JSON" };
    return { ok: false, error: "no HTTP answer from the node" };
  }
}

type Get = (path: string) => Promise<Dispatcher.ResponseData>;

/** The answer, or `null` for any failure to get it (refused, timed out, too large, garbage). */
async function unlessFailing<T>(answer: Promise<T | null>): Promise<T | null> {
  try {
    return await answer;
  } catch {
    return null;
  }
}

/**
 * The model ids the engine says it serves: `GET /v1/models` (`data[].id`, and llama.cpp's
 * `aliases`), or TGI's `GET /info` (`model_id`). `null` when it does not answer that: what a
 * node serves refines routing, and is never a reason to fail the probe.
 */
async function engineModels(
  framework: NodeSpec["framework"],
  get: Get,
  maxBodyBytes: number,
): Promise<string[] | null> {
  const tgi = framework === "tgi";
  const res = await get(tgi ? "/info" : "/v1/models");
  const text = await readCapped(res.body, maxBodyBytes, "models");
  if (res.statusCode !== 200) return null;
  if (tgi) {
    const info = TgiInfoSchema.safeParse(safeJson(text));
    return info.success ? [info.data.model_id] : null;
  }
  const list = ModelListSchema.safeParse(safeJson(text));
  if (!list.success) return null;
  return [...new Set(list.data.data.flatMap((m) => [m.id, ...(m.aliases ?? [])]))];
}

const ModelListSchema = z.looseObject({
  data: z.array(z.looseObject({ id: z.string(), aliases: z.array(z.string()).optional() })),
});
const TgiInfoSchema = z.looseObject({ model_id: z.string() });

/**
 * llama.cpp's slots (`/slots`): how many requests it runs at once, and the tokens its KV cache
 * holds, the slots' contexts (`n_ctx`) summed. `null` when the server does not expose its
 * slots (started without `--slots`) or answers something else: they refine what is known,
 * never a reason to fail the probe. With `--kv-unified` the slots share one cache and the sum
 * overstates it.
 */
async function llamacppSlots(
  get: Get,
  maxBodyBytes: number,
): Promise<{ count: number; tokens: number } | null> {
  const res = await get("/slots");
  const text = await readCapped(res.body, maxBodyBytes, "slots");
  if (res.statusCode !== 200) return null;
  const parsed = LlamacppSlotsSchema.safeParse(safeJson(text));
  if (!parsed.success || parsed.data.length === 0) return null;
  return {
    count: parsed.data.length,
    tokens: parsed.data.reduce((total, slot) => total + slot.n_ctx, 0),
  };
}

const LlamacppSlotsSchema = z.array(z.looseObject({ n_ctx: z.number().int().positive() }));

/** Why a health endpoint's non-200 answer fails the probe, with the engine's own words. */
function healthFailure(node: NodeSpec, status: number, body: string): string {
  const said = engineMessage(body);
  const base = `health endpoint answered ${status}${said === null ? "" : `: ${said}`}`;
  // llama-server answers every path 503 until its model is loaded.
  if (status === 503 && said !== null && /loading model/i.test(said)) {
    return `${base} (the engine is still loading its model)`;
  }
  if (status === 404 && node.health_path !== "/health") {
    return `${base} (health_path is ${node.health_path}; the engines named here serve /health)`;
  }
  return base;
}

/** Why a metrics endpoint's non-200 answer fails the probe, and what would fix it. */
function metricsFailure(node: NodeSpec, status: number, body: string): string {
  const said = engineMessage(body);
  const base = `metrics endpoint answered ${status}${said === null ? "" : `: ${said}`}`;
  if (node.framework === "llamacpp" && (status === 501 || /--metrics/.test(said ?? ""))) {
    return `${base} (start llama-server with --metrics)`;
  }
  if (node.framework === "sglang" && status === 404) {
    return `${base} (start SGLang with --enable-metrics)`;
  }
  return base;
}

/**
 * The message of an engine's JSON error (`{"error":{"message":…}}` from llama.cpp and
 * vLLM, `{"error":"…"}` from TGI, FastAPI's `{"detail":"…"}` from vLLM's and SGLang's
 * servers), or a short plain-text body; at most 160 printable
 * characters, since it lands in logs and node state.
 */
function engineMessage(body: string): string | null {
  const json = safeJson(body);
  const fromJson = EngineErrorSchema.safeParse(json);
  const fromFastApi = FastApiErrorSchema.safeParse(json);
  let message: string | null = null;
  if (fromJson.success) {
    const e = fromJson.data.error;
    message = typeof e === "string" ? e : (e.message ?? null);
  } else if (fromFastApi.success) {
    message = fromFastApi.data.detail;
  } else if (json === undefined && body.trim() !== "" && !body.trimStart().startsWith("<")) {
    message = body;
  }
  if (message === null) return null;
  const clean = message.replace(/[^\x20-\x7e]+/g, " ").trim();
  if (clean === "") return null;
  return clean.length > 160 ? `${clean.slice(0, 157)}...` : clean;
}

const FastApiErrorSchema = z.object({ detail: z.string() });

const EngineErrorSchema = z.object({
  error: z.union([z.string(), z.looseObject({ message: z.string().optional() })]),
});

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A health or metrics answer larger than the probe reads. */
class ProbeAnswerTooLarge extends Error {}

/** Reads a body as text, giving up (and closing it) past `maxBytes`. */
async function readCapped(
  body: Dispatcher.ResponseData["body"],
  maxBytes: number,
  what: string,
): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      body.destroy();
      throw new ProbeAnswerTooLarge(`${what} answer is larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size).toString("utf8");
}

function joinPath(endpoint: string, path: string): string {
  return new URL(endpoint).pathname.replace(/\/+$/, "") + path;
}
