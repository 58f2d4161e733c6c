// Which processes collected garbage while the slowest requests of the one-at-a-time rows ran.
// Reads what tail-probe.ts (every process) and load.ts (every request) wrote to one directory
// during a bench run; see docs/performance.md, "The tail of one request".
//
//   node test/bench/tail-report.ts <ZML_BENCH_TAIL_DIR>
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { quantile } from "./stats.ts";

interface ProcessGc {
  name: string;
  pid: number;
  /** [start ms since the epoch, duration ms, kind] */
  gc: [number, number, number][];
}

/** V8's GC kinds as Node reports them. */
const KIND: Record<number, string> = {
  1: "scavenge",
  2: "mark-compact",
  4: "incremental",
  8: "weak",
};

const dir = process.argv[2];
if (!dir) {
  process.stderr.write("usage: node test/bench/tail-report.ts <ZML_BENCH_TAIL_DIR>\n");
  process.exit(2);
}
const files = readdirSync(dir).filter((f) => f.endsWith(".json"));
const rows = files
  .filter((f) => f.startsWith("load-requests-"))
  .flatMap(
    (f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as [number, string, number, number][],
  );
const processes = files
  .filter((f) => !f.startsWith("load-requests-"))
  .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as ProcessGc)
  .filter((p) => p.gc.length > 0);
for (const p of processes) p.gc.sort((a, b) => a[0] - b[0]);

/** The collections of `p` that overlap [from, to]. */
function overlapping(p: ProcessGc, from: number, to: number): [number, number, number][] {
  let lo = 0;
  let hi = p.gc.length;
  // The first collection that starts after `from` minus the longest plausible pause.
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (p.gc[mid]![0] < from - 100) lo = mid + 1;
    else hi = mid;
  }
  const out: [number, number, number][] = [];
  for (let i = lo; i < p.gc.length && p.gc[i]![0] < to; i++) {
    const g = p.gc[i]!;
    if (g[0] + g[1] > from) out.push(g);
  }
  return out;
}

/** A plan's requests, if it ran one at a time (no request started before the last ended). */
const plans = new Map<number, { target: string; requests: [number, number][] }>();
for (const [id, target, start, ms] of rows) {
  let plan = plans.get(id);
  if (!plan) plans.set(id, (plan = { target, requests: [] }));
  plan.requests.push([start, ms]);
}
const MIN_REQUESTS = 200;
const byTarget = new Map<
  string,
  {
    slow: number;
    all: number;
    met: Map<string, number>;
    share: Map<string, number>;
    p99s: number[];
    p50s: number[];
  }
>();
for (const { target, requests } of plans.values()) {
  requests.sort((a, b) => a[0] - b[0]);
  const sequential = requests.every(
    (r, i) => i === 0 || r[0] >= requests[i - 1]![0] + requests[i - 1]![1] - 0.01,
  );
  if (!sequential || requests.length < MIN_REQUESTS) continue;
  const sorted = requests.map((r) => r[1]).sort((a, b) => a - b);
  const p99 = quantile(sorted, 0.99);
  let t = byTarget.get(target);
  if (!t)
    byTarget.set(
      target,
      (t = { slow: 0, all: 0, met: new Map(), share: new Map(), p99s: [], p50s: [] }),
    );
  t.p99s.push(p99);
  t.p50s.push(quantile(sorted, 0.5));
  for (const [start, ms] of requests) {
    const slow = ms >= p99;
    t.all += 1;
    if (slow) t.slow += 1;
    const met = new Set<string>();
    for (const p of processes) {
      for (const g of overlapping(p, start, start + ms)) met.add(`${p.name} ${KIND[g[2]] ?? g[2]}`);
    }
    const processNames = new Set([...met].map((m) => m.split(" ")[0]!));
    for (const n of processNames) t.share.set(n, (t.share.get(n) ?? 0) + 1);
    if (slow) {
      for (const m of met.size > 0 ? met : ["no collection"]) t.met.set(m, (t.met.get(m) ?? 0) + 1);
    }
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const [target, t] of byTarget) {
  const lines = [
    `## ${target}`,
    `${t.p99s.length} one-at-a-time rounds, ${t.all} requests; median of the rounds' p50 ${median(t.p50s).toFixed(2)} ms, p99 ${median(t.p99s).toFixed(2)} ms`,
    `requests at or above their round's p99: ${t.slow}; what ran during them (a request can meet several):`,
    ...[...t.met].sort((a, b) => b[1] - a[1]).map(([m, n]) => `  ${String(n).padStart(4)}  ${m}`),
    "all requests that met a collection, by process:",
    ...[...t.share]
      .sort((a, b) => b[1] - a[1])
      .map(([n, c]) => `  ${((100 * c) / t.all).toFixed(2).padStart(6)} %  ${n}`),
    "",
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}
