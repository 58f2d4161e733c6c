// The routing-quality report: one markdown table per workload, one row per side, in the
// style of the main bench report (padded columns, figures right-aligned).
import { table } from "../report.ts";
import type { QualityNodeSettings } from "./stack.ts";
import type { Workload, WorkloadKey } from "./workloads.ts";

export const SIDES = {
  zml: "ZML, cache-aware",
  "zml-no-affinity": "ZML, prefix_affinity: false",
  "zml-2-dispatchers": "ZML, cache-aware, 2 dispatchers",
  random: "random node (direct)",
  "tenant-hash": "tenant → node by hash (direct)",
} as const;
export type SideKey = keyof typeof SIDES;
export const SIDE_KEYS = Object.keys(SIDES) as SideKey[];

export interface QualityRow {
  workload: WorkloadKey;
  side: SideKey;
  sent: number;
  completed: number;
  failed: number;
  failures: string[];
  ttftMs: { p50: number; p90: number; p99: number };
  /** Tokens the nodes generated ÷ the side's wall time (first request → last answer). */
  outputTokensPerS: number;
  /** The nodes' `prefix_cache_hits` ÷ `prefix_cache_queries` over the side. */
  hitRate: number;
  /** The nodes' (queries − hits) ÷ requests answered: prompt tokens actually prefilled. */
  prefillTokensPerRequest: number;
  /** The busiest node's share of the requests the nodes answered. */
  busiestNodeShare: number;
  /** Mean `cached-tokens` of `x-zml-routing` (ZML sides, once the gateway sends it). */
  expectedCachedTokens: number | null;
  /**
   * ZML sides: requests each dispatcher replica routed during the side, warm-up included
   * (`zml_dispatcher_decisions_total{outcome="routed"}`); null on the direct sides.
   */
  routedPerReplica: number[] | null;
  elapsedS: number;
}

export interface QualitySummary {
  date: string;
  build: string;
  machine: { cpus: number; loadAverage: { start: number[]; end: number[] } };
  settings: {
    size: string;
    warmupS: number;
    durationS: number;
    seed: number;
    rateScale: number;
    nodes: QualityNodeSettings;
  };
  workloads: Workload[];
  rows: QualityRow[];
  elapsedS: number;
}

function ms(value: number): string {
  if (!Number.isFinite(value)) return "–";
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

const pct = (value: number) => (Number.isFinite(value) ? `${(value * 100).toFixed(1)} %` : "–");
const int = (value: number) =>
  Number.isFinite(value) ? Math.round(value).toLocaleString("en-US") : "–";

export function renderQualityReport(summary: QualitySummary, command: string): string {
  const { machine, settings } = summary;
  const n = settings.nodes;
  const lines = [
    "# Routing quality",
    "",
    `\`${command}\` — ${summary.date}, build ${summary.build}, ${machine.cpus} CPUs, load average ` +
      `${machine.loadAverage.start.map((l) => l.toFixed(2)).join(" ")} at start, ` +
      `${machine.loadAverage.end.map((l) => l.toFixed(2)).join(" ")} at end; ` +
      `${summary.elapsedS.toFixed(0)} s.`,
    "",
    `${n.count} simulated caching nodes (node-sim engine model): ${n.kvCacheBlocks} KV blocks of 16 ` +
      `tokens, prefill ${n.prefillTokensPerSecond} tokens/s one at a time, decode step ` +
      `${n.stepBaseMs} + ${n.stepPerSequenceMs} ms × batch, ${n.maxRunning} sequences. ` +
      `Each side: every cache reset, then open-loop Poisson arrivals (seed ${settings.seed}), ` +
      `${settings.warmupS} s unmeasured from cold, then ${settings.durationS} s measured; ` +
      "the same arrivals and tenants on every side, with prompts of its own. Hit rate and " +
      "prefill tokens are the nodes' own counters (`vllm:prefix_cache_*`) over the measured " +
      "window; TTFT is the client's, to the first event.",
  ];
  for (const workload of summary.workloads) {
    const rows = summary.rows.filter((r) => r.workload === workload.key);
    if (rows.length === 0) continue;
    lines.push(
      "",
      `## ${workload.title} (${(workload.ratePerS * settings.rateScale).toFixed(0)} req/s, ` +
        `${workload.outputTokens}-token answers)`,
      "",
      table(
        [
          "side",
          "TTFT p50 ms",
          "TTFT p90 ms",
          "TTFT p99 ms",
          "output tok/s",
          "hit rate",
          "prefill tok/req",
          "busiest node",
          "answered",
          "failed",
        ],
        rows.map((r) => [
          SIDES[r.side],
          ms(r.ttftMs.p50),
          ms(r.ttftMs.p90),
          ms(r.ttftMs.p99),
          int(r.outputTokensPerS),
          pct(r.hitRate),
          int(r.prefillTokensPerRequest),
          pct(r.busiestNodeShare),
          String(r.completed),
          String(r.failed),
        ]),
      ),
    );
    const expected = rows.filter((r) => r.expectedCachedTokens !== null);
    if (expected.length > 0) {
      lines.push(
        "",
        expected
          .map(
            (r) =>
              `${SIDES[r.side]}: the gateway expected ${int(r.expectedCachedTokens!)} cached tokens a request.`,
          )
          .join(" "),
      );
    }
    const replicated = rows.filter((r) => (r.routedPerReplica?.length ?? 0) > 1);
    for (const r of replicated) {
      lines.push(
        "",
        `${SIDES[r.side]}: requests routed per replica (warm-up included): ` +
          `${r.routedPerReplica!.join(", ")}.`,
      );
    }
    for (const r of rows.filter((row) => row.failures.length > 0)) {
      lines.push("", `${SIDES[r.side]} failures: ${r.failures.join("; ")}`);
    }
  }
  return `${lines.join("\n")}\n`;
}
