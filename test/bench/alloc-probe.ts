// Loaded into a service with `--import` by `run.ts --alloc`: V8's sampling heap profiler,
// counting every allocation, also those a garbage collection has already freed. Each
// SIGUSR2 appends the bytes allocated since the previous one to ZML_BENCH_ALLOC_FILE, as one
// JSON line with the functions that allocated most, and starts counting again. Never part of
// a deployed service.
import { appendFileSync } from "node:fs";
import { Session } from "node:inspector/promises";

interface SampleNode {
  selfSize: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children: SampleNode[];
}

/** How many allocating functions each line names, the largest first. */
const TOP_SITES = 15;

/** One sample per 4 KiB allocated on average: cheap enough to leave the services usable. */
const SAMPLING_INTERVAL_BYTES = 4096;

const file = process.env.ZML_BENCH_ALLOC_FILE;
if (file) {
  const session = new Session();
  session.connect();
  const start = () =>
    session.post("HeapProfiler.startSampling", {
      samplingInterval: SAMPLING_INTERVAL_BYTES,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
  const total = (node: SampleNode): number =>
    node.children.reduce((sum, child) => sum + total(child), node.selfSize);
  // Bytes by the allocating function and its caller: where a copy comes from, not only that
  // `Buffer.concat` made it.
  const sites = (root: SampleNode) => {
    const bytes = new Map<string, number>();
    const name = (n: SampleNode) => {
      const file = n.callFrame.url.replace(/^.*\/(node_modules|services|libs)\//, "$1/");
      return `${n.callFrame.functionName || "(anonymous)"} ${file}:${n.callFrame.lineNumber + 1}`;
    };
    const walk = (n: SampleNode, caller: string) => {
      const here = name(n);
      if (n.selfSize > 0) {
        const key = `${here} ← ${caller}`;
        bytes.set(key, (bytes.get(key) ?? 0) + n.selfSize);
      }
      for (const child of n.children) walk(child, here);
    };
    walk(root, "(root)");
    return [...bytes]
      .sort((a, b) => b[1] - a[1])
      .slice(0, TOP_SITES)
      .map(([site, b]) => ({ site, bytes: b }));
  };
  await session.post("HeapProfiler.enable");
  await start();
  process.on("SIGUSR2", () => {
    void (async () => {
      const { profile } = await session.post("HeapProfiler.stopSampling");
      await start();
      const line = { bytes: total(profile.head), sites: sites(profile.head) };
      appendFileSync(file, `${JSON.stringify(line)}\n`);
    })();
  });
}
