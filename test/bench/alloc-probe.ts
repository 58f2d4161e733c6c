// Loaded into a service with `--import` by `run.ts --alloc`: V8's sampling heap profiler,
// counting every allocation, also those a garbage collection has already freed. Each
// SIGUSR2 appends the bytes allocated since the previous one to ZML_BENCH_ALLOC_FILE, as one
// JSON line, and starts counting again. Never part of a deployed service.
import { appendFileSync } from "node:fs";
import { Session } from "node:inspector/promises";

interface SampleNode {
  selfSize: number;
  children: SampleNode[];
}

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
  await session.post("HeapProfiler.enable");
  await start();
  process.on("SIGUSR2", () => {
    void (async () => {
      const { profile } = await session.post("HeapProfiler.stopSampling");
      await start();
      appendFileSync(file, `${JSON.stringify({ bytes: total(profile.head) })}\n`);
    })();
  });
}
