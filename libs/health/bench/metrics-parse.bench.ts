// Time to read a real vLLM /metrics capture (24 KB, 260 sample lines): the parse alone and the
// whole `readMetrics("vllm", text)` the health aggregator runs on every poll.
//
// `--baseline DIR` times another copy of this package in the same run and prints new ÷ old:
// DIR is a `libs/health` directory whose `src/` imports resolve from DIR, e.g. for the commit
// before the package's own parser:
//
//   git archive e824a1c libs/health | tar -x -C /tmp/health-base
//   npm install --prefix /tmp/health-base --no-save parse-prometheus-text-format@1.1.1
//   npm run bench -w @zml/health -- --baseline /tmp/health-base/libs/health
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

type Read = (framework: "vllm", text: string) => unknown;
type Parse = (source: "vllm", text: unknown) => unknown;

interface Subject {
  readonly label: string;
  readonly readMetrics: Read;
  readonly parseExposition: Parse;
}

async function load(label: string, dir: URL): Promise<Subject> {
  const reading = (await import(new URL("src/metrics-reading.ts", dir).href)) as {
    readMetrics: Read;
  };
  const exposition = (await import(new URL("src/exposition.ts", dir).href)) as {
    parseExposition: Parse;
  };
  return {
    label,
    readMetrics: reading.readMetrics,
    parseExposition: exposition.parseExposition,
  };
}

/** Median ns per call over `rounds` rounds of `calls` calls each. */
function time(run: () => unknown, rounds: number, calls: number): number {
  const perCall: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) run();
    perCall.push(Number(process.hrtime.bigint() - start) / calls);
  }
  perCall.sort((a, b) => a - b);
  return perCall[Math.floor(perCall.length / 2)]!;
}

const { values } = parseArgs({
  options: {
    baseline: { type: "string" },
    rounds: { type: "string", default: "31" },
    calls: { type: "string", default: "200" },
  },
});
const rounds = Number(values.rounds);
const calls = Number(values.calls);
const text = readFileSync(
  new URL("../test/fixtures/vllm-v0-qwen3-0.6b.prom", import.meta.url),
  "utf8",
);

const subjects = [await load("this", new URL("../", import.meta.url))];
if (values.baseline !== undefined) {
  subjects.push(await load("baseline", pathToFileURL(`${resolve(values.baseline)}/`)));
}

const cases = [
  { name: "parse", run: (s: Subject) => () => s.parseExposition("vllm", text) },
  { name: "readMetrics", run: (s: Subject) => () => s.readMetrics("vllm", text) },
] as const;

console.log(`vLLM capture: ${text.length} bytes; median of ${rounds} rounds × ${calls} calls`);
for (const c of cases) {
  // Warm every subject first, then interleave them so that both see the same machine.
  for (const s of subjects) time(c.run(s), 5, calls);
  const totals = new Map<string, number[]>();
  for (let pass = 0; pass < 3; pass++) {
    for (const s of subjects) {
      const list = totals.get(s.label) ?? [];
      list.push(time(c.run(s), rounds, calls));
      totals.set(s.label, list);
    }
  }
  const median = (list: number[]) => [...list].sort((a, b) => a - b)[1]!;
  const line = subjects
    .map((s) => `${s.label} ${(median(totals.get(s.label)!) / 1000).toFixed(1)} µs`)
    .join(", ");
  const ratio =
    subjects.length === 2
      ? `; this ÷ baseline = ${(median(totals.get("this")!) / median(totals.get("baseline")!)).toFixed(2)}`
      : "";
  console.log(`${c.name}: ${line}${ratio}`);
}
