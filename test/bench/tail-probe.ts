// Loaded with `--import` into every process of a bench run (see docs/performance.md, "The
// tail of one request"): records each V8 garbage collection (wall-clock start in ms since the
// epoch, duration in ms, kind: 1 scavenge, 2 mark-compact, 4 incremental marking, 8 weak
// callbacks) and writes them to `<ZML_BENCH_TAIL_DIR>/<script>-<pid>.json`, so that
// tail-report.ts can tell which slow requests met a collection in which process. Never part of
// a deployed service.
import { writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { PerformanceObserver, performance } from "node:perf_hooks";

/** How often the file is rewritten: a service stopped with SIGKILL keeps what it had. */
const FLUSH_MS = 2_000;

const dir = process.env.ZML_BENCH_TAIL_DIR;
const script = process.argv[1];
if (dir && script) {
  // `services/intake/src/main.ts` → `intake`, `libs/node-sim/src/cli.ts` → `node-sim-cli`,
  // `test/bench/floor/worker.ts` → `floor-worker`, `test/bench/load.ts` → `load`.
  const parent = basename(dirname(script));
  const base = basename(script, ".ts");
  const name =
    parent === "src"
      ? base === "main"
        ? basename(dirname(dirname(script)))
        : `${basename(dirname(dirname(script)))}-${base}`
      : parent === "bench"
        ? base
        : `${parent}-${base}`;
  const file = join(dir, `${name}-${process.pid}.json`);
  const gc: [number, number, number][] = [];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      // A gc entry's `detail` is `{ kind, flags }` (Node's docs); the type declares none.
      const { detail } = entry as unknown as { detail?: { kind?: number } };
      const kind = detail?.kind ?? 0;
      gc.push([performance.timeOrigin + entry.startTime, entry.duration, kind]);
    }
  }).observe({ entryTypes: ["gc"] });
  const flush = () => writeFileSync(file, JSON.stringify({ name, pid: process.pid, gc }));
  setInterval(flush, FLUSH_MS).unref();
  process.on("exit", flush);
}
