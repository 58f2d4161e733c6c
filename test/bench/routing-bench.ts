// Figure 6: the routing decision alone. libs/routing owns that micro-benchmark; this runs it
// as a child process on a quiet machine (after the gateway stack has stopped) and reads its
// lines, e.g. `  256 nodes  balanced   p50  9.85 µs  p99  17.59 µs  bucket 256, viable 203  (78125 runs)`.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "@zml/harness";

export interface DecisionFigure {
  nodes: number;
  /** The policy and fleet variant measured (`balanced`, `cost`, `balanced, mixed`, ...). */
  variant: string;
  p50Us: number;
  p99Us: number;
  /** The rest of the line (fleet shape, run count), as printed. */
  detail: string;
}

export type RoutingFigures =
  { available: true; rows: DecisionFigure[] } | { available: false; reason: string };

export const ROUTING_BENCH_PATH = "libs/routing/bench/decide.bench.ts";

const LINE = /^\s*(\d+)\s+nodes\s+(.+?)\s+p50\s+([\d.]+)\s*µs\s+p99\s+([\d.]+)\s*µs\s*(.*)$/;

/** Parses the decision benchmark's output; lines it does not recognise are skipped. */
export function parseDecisionOutput(output: string): DecisionFigure[] {
  const rows: DecisionFigure[] = [];
  for (const line of output.split("\n")) {
    const m = LINE.exec(line);
    if (m)
      rows.push({
        nodes: Number(m[1]),
        variant: m[2]!,
        p50Us: Number(m[3]),
        p99Us: Number(m[4]),
        detail: m[5]!.trim(),
      });
  }
  return rows;
}

export async function runRoutingBench(timeoutMs = 150_000): Promise<RoutingFigures> {
  const script = join(repoRoot(), ROUTING_BENCH_PATH);
  if (!existsSync(script)) return { available: false, reason: `${ROUTING_BENCH_PATH} not found` };
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)(process.execPath, [script], {
      timeout: timeoutMs,
      maxBuffer: 4 * 1024 * 1024,
    }));
  } catch (error) {
    const e = error as { stderr?: string; message?: string; killed?: boolean };
    if (e.killed === true) {
      const reason = `${ROUTING_BENCH_PATH} timed out after ${timeoutMs / 1000} s`;
      return { available: false, reason };
    }
    const detail = (e.stderr ?? "").trim().split("\n").slice(-3).join(" / ") || e.message;
    return {
      available: false,
      reason: `${ROUTING_BENCH_PATH} failed: ${detail ?? "unknown error"}`,
    };
  }
  const rows = parseDecisionOutput(stdout);
  return rows.length > 0
    ? { available: true, rows }
    : {
        available: false,
        reason: `${ROUTING_BENCH_PATH} printed no figures this harness understands`,
      };
}
