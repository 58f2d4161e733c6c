// The bench's regression check: a row whose throughput against the floor fell by more than
// 15 % between two runs of the same build. The floor moves with the machine, so a ratio to it
// stays comparable across runs where raw requests per second do not. Not a CI gate: it makes
// the next silent regression visible to whoever runs the bench.
//
// `node test/bench/compare.ts <before.json> <after.json>`: exits 1 when a row regressed.
import { readFileSync } from "node:fs";
import type { BenchSummary } from "./summary.ts";

/** A drop larger than this fraction of the earlier ratio is a regression. */
export const REGRESSION_TOLERANCE = 0.15;

export interface RowChange {
  key: string;
  title: string;
  /** ZML ÷ floor throughput in the earlier and the later run. */
  before: number;
  after: number;
  /** after ÷ before − 1. */
  change: number;
  regressed: boolean;
}

/** Every row both runs measured against the floor, and whether it regressed. Pure. */
export function compareAgainstFloor(
  before: Pick<BenchSummary, "scenarios">,
  after: Pick<BenchSummary, "scenarios">,
  tolerance = REGRESSION_TOLERANCE,
): RowChange[] {
  const changes: RowChange[] = [];
  for (const row of after.scenarios) {
    const earlier = before.scenarios.find((s) => s.key === row.key)?.vsFloor?.rps;
    const later = row.vsFloor?.rps;
    if (earlier === undefined || later === undefined) continue;
    if (!Number.isFinite(earlier) || !Number.isFinite(later) || earlier <= 0) continue;
    const change = later / earlier - 1;
    changes.push({
      key: row.key,
      title: row.title,
      before: earlier,
      after: later,
      change,
      regressed: change < -tolerance,
    });
  }
  return changes;
}

/** The comparison as a few lines for the terminal; a regression gets a banner no one misses. */
export function renderComparison(changes: RowChange[], what: string): string {
  const lines = changes.map(
    (c) =>
      `${c.regressed ? "REGRESSED" : "ok       "} ${c.key.padEnd(16)} ZML ÷ floor ` +
      `${c.before.toFixed(2)}× → ${c.after.toFixed(2)}× (${c.change >= 0 ? "+" : ""}${(c.change * 100).toFixed(0)} %)`,
  );
  const regressed = changes.filter((c) => c.regressed);
  if (regressed.length === 0)
    return [`against the floor, ${what}: no row dropped`, ...lines].join("\n");
  const banner = "!".repeat(78);
  return [
    banner,
    `!! ${regressed.length} row(s) fell more than ${REGRESSION_TOLERANCE * 100} % against the floor, ${what}:`,
    ...lines,
    banner,
  ].join("\n");
}

if (import.meta.main) {
  const [beforeFile, afterFile] = process.argv.slice(2);
  if (beforeFile === undefined || afterFile === undefined) {
    process.stderr.write("usage: node test/bench/compare.ts <before.json> <after.json>\n");
    process.exit(2);
  }
  const read = (file: string) => JSON.parse(readFileSync(file, "utf8")) as BenchSummary;
  const changes = compareAgainstFloor(read(beforeFile), read(afterFile));
  process.stdout.write(`${renderComparison(changes, `${beforeFile} → ${afterFile}`)}\n`);
  process.exitCode = changes.some((c) => c.regressed) ? 1 : 0;
}
