import type { NodeSpec } from "@zml/contracts";
import { readMetrics } from "@zml/health";
import type { ProbeResult } from "@zml/health";
import type { Dispatcher } from "undici";

/**
 * Probes one node: its health endpoint, then (for vLLM and TGI) its Prometheus metrics.
 * Every failure becomes a failed ProbeResult with a reason; nothing throws.
 */
export async function probeNode(
  agent: Dispatcher,
  node: NodeSpec,
  timeoutMs: number,
): Promise<ProbeResult> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const health = await agent.request({
      origin: new URL(node.endpoint).origin,
      path: joinPath(node.endpoint, node.health_path),
      method: "GET",
      signal,
    });
    await health.body.dump();
    if (health.statusCode !== 200) {
      return { ok: false, error: `health endpoint answered ${health.statusCode}` };
    }
    if (node.framework !== "vllm" && node.framework !== "tgi") {
      return { ok: true, reading: null };
    }
    const metrics = await agent.request({
      origin: new URL(node.endpoint).origin,
      path: joinPath(node.endpoint, node.metrics_path),
      method: "GET",
      signal,
    });
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
