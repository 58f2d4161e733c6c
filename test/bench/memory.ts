// Figure 7: memory of each service, from the kernel (resident set) and from the service's own
// Prometheus metrics (V8 heap in use, memory held outside the heap by buffers).
import { parsePrometheusText } from "@zml/health";
import { request } from "undici";
import type { BenchStack } from "./bench-stack.ts";
import { memoryOf } from "./proc.ts";

export interface ServiceMemory {
  rssMiB: number;
  peakRssMiB: number;
  /** `nodejs_heap_size_used_bytes`; NaN when the service has no such metric. */
  heapUsedMiB: number;
  /** `nodejs_external_memory_bytes` (Buffers and other memory outside the V8 heap). */
  externalMiB: number;
}

const MIB = 1024 * 1024;

async function scrape(url: string | undefined): Promise<Map<string, number>> {
  const values = new Map<string, number>();
  if (url === undefined) return values;
  try {
    const res = await request(`${url}/metrics`);
    const { series } = parsePrometheusText(await res.body.text());
    for (const name of ["nodejs_heap_size_used_bytes", "nodejs_external_memory_bytes"]) {
      const value = series.get(name)?.[0]?.value;
      if (value !== undefined) values.set(name, value);
    }
  } catch {
    // A service without metrics still has its /proc figures.
  }
  return values;
}

/** Memory of the four services and of nats-server (kernel figures only: not a Node process). */
export async function measureMemory(stack: BenchStack): Promise<Record<string, ServiceMemory>> {
  const out: Record<string, ServiceMemory> = {};
  for (const name of ["intake", "dispatcher", "health-aggregator", "attestation"]) {
    const pid = stack.services.get(name)?.pid;
    const proc = pid === undefined ? undefined : memoryOf(pid);
    const metrics = await scrape(stack.opsUrls.get(name));
    out[name] = {
      rssMiB: proc?.rssMiB ?? Number.NaN,
      peakRssMiB: proc?.peakMiB ?? Number.NaN,
      heapUsedMiB: (metrics.get("nodejs_heap_size_used_bytes") ?? Number.NaN) / MIB,
      externalMiB: (metrics.get("nodejs_external_memory_bytes") ?? Number.NaN) / MIB,
    };
  }
  const nats = stack.natsPid === undefined ? undefined : memoryOf(stack.natsPid);
  if (nats !== undefined) {
    out["nats-server"] = {
      rssMiB: nats.rssMiB,
      peakRssMiB: nats.peakMiB,
      heapUsedMiB: Number.NaN,
      externalMiB: Number.NaN,
    };
  }
  return out;
}
