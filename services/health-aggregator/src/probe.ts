import { isTeeTier } from "@zml/contracts";
import type { NodeSpec } from "@zml/contracts";
import { idleReading, readCustomHealth, readMetrics } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import { Agent } from "undici";
import type { Dispatcher } from "undici";

/** The real probe: HTTP through keep-alive agents, one for plain nodes, one for TEE nodes. */
export function createNodeProber(options: { keepAliveMs: number; timeoutMs: number }): {
  probe: (node: NodeSpec) => Promise<ProbeResult>;
  close: () => Promise<void>;
} {
  const agent = new Agent({ keepAliveTimeout: options.keepAliveMs, connections: 4 });
  // Tier 3/4 nodes present a TLS key their quote vouches for, not a CA-issued certificate.
  // Health polls carry no payload, so they need not pin it (the dispatcher does); they only
  // must not refuse the certificate.
  const teeAgent = new Agent({
    keepAliveTimeout: options.keepAliveMs,
    connections: 4,
    connect: { rejectUnauthorized: false },
  });
  return {
    probe: (node) => probeNode(isTeeTier(node.tier) ? teeAgent : agent, node, options.timeoutMs),
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
  timeoutMs: number,
): Promise<ProbeResult> {
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
    const healthText = await health.body.text();
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
    const text = await metrics.body.text();
    if (metrics.statusCode !== 200) {
      return { ok: false, error: `metrics endpoint answered ${metrics.statusCode}` };
    }
    return { ok: true, reading: readMetrics(node.framework, text) };
  } catch (err) {
    const e = err as { code?: string; name?: string; message?: string };
    return { ok: false, error: e.code ?? e.name ?? e.message ?? "probe failed" };
  }
}

function joinPath(endpoint: string, path: string): string {
  return new URL(endpoint).pathname.replace(/\/+$/, "") + path;
}
