import { isTeeTier } from "@zml/contracts";
import type { NodeAddressPolicy, NodeSpec } from "@zml/contracts";
import { idleReading, MetricsReadError, readCustomHealth, readMetrics } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import { guardedConnector, NodeAddressRefusedError, systemResolver } from "@zml/runtime";
import type { HostResolver } from "@zml/runtime";
import { Agent } from "undici";
import type { Dispatcher } from "undici";

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
 * Probes one node: its health endpoint, then (for vLLM and TGI) its Prometheus metrics;
 * custom servers answer the JSON health format on their health path. Every failure becomes
 * a failed ProbeResult with a reason; nothing throws.
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
      return { ok: false, error: `health endpoint answered ${health.statusCode}` };
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
      return { ok: false, error: `metrics endpoint answered ${metrics.statusCode}` };
    }
    return { ok: true, reading: readMetrics(node.framework, text) };
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
