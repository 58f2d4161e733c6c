// One rendering for the terminal and for bench-results/latest.md: markdown tables with padded
// columns read well in both.
import type { BenchSummary, FeatureRow, ScenarioSummary, Target } from "./summary.ts";

/** A figure: a number (with a ratio's × or a percent), or the dash of "none". */
const NUMERIC = /^(–|[-+]?\d[\d.,]*(×| %)?)$/;

/** A markdown table; columns holding only figures are right-aligned. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const right = header.map(
    (_, i) => rows.length > 0 && rows.every((r) => NUMERIC.test(r[i] ?? "")),
  );
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (right[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join(" | ")} |`;
  const rule = `|${widths.map((w, i) => (right[i] ? `${"-".repeat(w + 1)}:` : "-".repeat(w + 2))).join("|")}|`;
  return [line(header), rule, ...rows.map(line)].join("\n");
}

function num(value: number | undefined, digits: number): string {
  return value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);
}

function ms(value: number | undefined): string {
  if (value === undefined || !Number.isFinite(value)) return "–";
  return Math.abs(value) >= 100
    ? value.toFixed(0)
    : Math.abs(value) >= 10
      ? value.toFixed(1)
      : value.toFixed(2);
}

function signed(value: number | undefined): string {
  const text = ms(value);
  return value !== undefined && value > 0 ? `+${text}` : text;
}

function ratio(value: number | undefined): string {
  return value === undefined || !Number.isFinite(value) ? "–" : `${value.toFixed(2)}×`;
}

function latencyTable(scenarios: ScenarioSummary[]): string {
  return table(
    [
      "scenario",
      "direct p50",
      "ZML p50",
      "added p50",
      "p50 ×",
      "direct p99",
      "ZML p99",
      "added p99",
      "p99 ×",
      "direct req/s",
      "ZML req/s",
      "req/s ×",
    ],
    scenarios.map((s) => [
      s.title,
      ms(s.direct.p50Ms),
      ms(s.gateway.p50Ms),
      signed(s.addedMs.p50),
      ratio(s.ratio.p50),
      ms(s.direct.p99Ms),
      ms(s.gateway.p99Ms),
      signed(s.addedMs.p99),
      ratio(s.ratio.p99),
      num(s.direct.rps, 0),
      num(s.gateway.rps, 0),
      ratio(s.ratio.rps),
    ]),
  );
}

function streamTable(scenarios: ScenarioSummary[]): string {
  return table(
    [
      "scenario",
      "direct TTFT p50",
      "ZML TTFT p50",
      "added TTFT p50",
      "added TTFT p99",
      "direct gap p99",
      "ZML gap p99",
      "added gap p99",
      "streams ok",
      "failed",
      "of which broken",
    ],
    scenarios.map((s) => [
      s.title,
      ms(s.direct.ttftP50Ms),
      ms(s.gateway.ttftP50Ms),
      signed(s.addedMs.ttftP50),
      signed(s.addedMs.ttftP99),
      ms(s.direct.gapP99Ms),
      ms(s.gateway.gapP99Ms),
      signed(s.addedMs.gapP99),
      String(s.completed),
      String(s.failed),
      String(s.brokenStreams ?? 0),
    ]),
  );
}

/**
 * ZML against the floor (`floor/`): the same rows, the floor's lean build of ZML's shape
 * measured in the same run, interleaved. What the floor leaves out: docs/performance.md.
 */
function floorTable(scenarios: ScenarioSummary[]): string {
  return table(
    [
      "scenario",
      "floor ÷ direct",
      "floor req/s",
      "ZML req/s",
      "ZML ÷ floor",
      "floor p50",
      "ZML p50",
      "ZML − floor p50",
      "ZML − floor p99",
      "ZML − floor TTFT p50",
    ],
    scenarios.map((s) => [
      s.title,
      ratio(s.vsFloor?.floorRps),
      num(s.floor?.rps, 0),
      num(s.gateway.rps, 0),
      ratio(s.vsFloor?.rps),
      ms(s.floor?.p50Ms),
      ms(s.gateway.p50Ms),
      signed(s.vsFloor?.addedP50),
      signed(s.vsFloor?.addedP99),
      signed(s.vsFloor?.addedTtftP50),
    ]),
  );
}

/** The processes every CPU table names, in this order; each table adds its own. */
const GATEWAY_PROCESSES = ["load", "intake", "dispatcher", "nats-server", "health-aggregator"];

/** A side's CPU per request summed over `names` (the processes a table shows). */
function totalCpu(cpu: Record<string, number>, names: readonly string[]): number {
  return names.reduce((n, k) => n + (Number.isFinite(cpu[k]) ? cpu[k]! : 0), 0);
}

function cpuTable(scenarios: ScenarioSummary[]): string {
  const names = [...GATEWAY_PROCESSES, "node", "floor-intake", "floor-worker"];
  const rows: string[][] = [];
  for (const s of scenarios) {
    const sides = [
      ["direct", s.cpuUsPerRequest.direct],
      ...(s.cpuUsPerRequest.floor ? [["floor", s.cpuUsPerRequest.floor] as const] : []),
      ["ZML", s.cpuUsPerRequest.gateway],
    ] as const;
    for (const [label, cpu] of sides) {
      const total = totalCpu(cpu, names);
      rows.push([`${s.key} ${label}`, ...names.map((k) => num(cpu[k], 0)), num(total, 0)]);
    }
  }
  return table(["scenario, side", ...names, "total"], rows);
}

/** The processes a token crosses on each way: CPU per token is summed over these. */
const TOKEN_PATH = {
  ZML: ["intake", "dispatcher", "nats-server"],
  floor: ["floor-intake", "floor-worker", "nats-server"],
} as const;

/**
 * The fleet rows, per token: throughput against direct, what ZML and the floor add to the
 * first token and to the gaps, and the gateway's CPU per token on the token's path.
 */
function fleetSection(scenarios: ScenarioSummary[], goals: Target[]): string[] {
  const rows = scenarios.filter((s) => s.fleet !== undefined);
  if (rows.length === 0) return [];
  const latency: string[][] = [];
  const cpu: string[][] = [];
  for (const s of rows) {
    const f = s.fleet!;
    const sides: Array<{
      label: string;
      tps: number | undefined;
      added: NonNullable<typeof f.added.floor>;
      perToken: Record<string, number>;
      path: readonly string[];
    }> = [
      {
        label: "ZML",
        tps: f.tokensPerS.gateway,
        added: f.added.gateway,
        perToken: f.cpuUsPerToken.gateway,
        path: TOKEN_PATH.ZML,
      },
    ];
    if (f.added.floor && f.cpuUsPerToken.floor) {
      sides.push({
        label: "floor",
        tps: f.tokensPerS.floor,
        added: f.added.floor,
        perToken: f.cpuUsPerToken.floor,
        path: TOKEN_PATH.floor,
      });
    }
    for (const { label, tps, added, perToken, path } of sides) {
      latency.push([
        `${s.key} ${label}`,
        num(f.tokensPerS.direct, 0),
        num(tps, 0),
        ratio((tps ?? NaN) / f.tokensPerS.direct),
        ms(s.direct.ttftP50Ms),
        signed(added.ttftP50),
        ms(s.direct.ttftP99Ms),
        signed(added.ttftP99),
        ms(s.direct.gapP99Ms),
        signed(added.gapP99),
        ms(s.direct.gapMaxMs),
        signed(added.gapMax),
      ]);
      cpu.push([
        `${s.key} ${label}`,
        ...path.map((p) => num(perToken[p], 1)),
        num(totalCpu(perToken, path), 1),
      ]);
    }
  }
  return [
    "## Fleet streams: an engine's tokens, per token",
    "",
    "One node steps every 20 ms and sends a token to every running stream (`step-node.ts`); " +
      "arrivals spread over one stream's length. Tokens/s is what the clients received; added " +
      "times are against direct in the same round. The floor's stream variant publishes one " +
      "bus message per chunk it reads.",
    "",
    table(
      [
        "row, side",
        "direct tok/s",
        "tok/s",
        "÷ direct",
        "direct TTFT p50",
        "added",
        "direct TTFT p99",
        "added",
        "direct gap p99",
        "added",
        "direct gap max",
        "added",
      ],
      latency,
    ),
    "",
    "CPU µs per token on the token's path (intake or the floor's intake, the dispatcher or " +
      "the floor's worker, nats-server), and their sum:",
    "",
    table(["row, side", "intake", "dispatcher / worker", "nats-server", "sum"], cpu),
    "",
    ...(goals.length > 0
      ? ["Goals for the fleet rows (reported, never failing the run):", "", targetTable(goals), ""]
      : []),
  ];
}

function targetTable(targets: BenchSummary["targets"]): string {
  return table(
    ["target", "measured", "limit", "result"],
    targets.map((t) => [
      t.name,
      num(t.value, 2),
      `${t.comparison} ${t.limit}`,
      t.pass ? "met" : "MISSED",
    ]),
  );
}

/**
 * The tier-4 rows: the same stream plain (tier 3) and sealed (tier 4), both through ZML to
 * the same TD proxy and node; the sealing goals; and where the CPU went, per process.
 */
function sealingSection(summary: BenchSummary): string[] {
  const rows = summary.scenarios.filter((s) => s.sealing);
  if (rows.length === 0) return [];
  const names = [...GATEWAY_PROCESSES, "td-proxy", "node"];
  const cpu: string[][] = [];
  for (const s of rows) {
    const plain = s.cpuUsPerRequest.direct;
    const sealed = s.cpuUsPerRequest.gateway;
    const total = (c: Record<string, number>) => totalCpu(c, names);
    cpu.push([`${s.key} unsealed`, ...names.map((k) => num(plain[k], 0)), num(total(plain), 0)]);
    cpu.push([`${s.key} sealed`, ...names.map((k) => num(sealed[k], 0)), num(total(sealed), 0)]);
    cpu.push([
      `${s.key} sealed − unsealed`,
      ...names.map((k) => signedNum((sealed[k] ?? NaN) - (plain[k] ?? NaN))),
      signedNum(total(sealed) - total(plain)),
    ]);
  }
  return [
    "## Tier 4: a sealed stream against the same stream unsealed",
    "",
    "Both sides through ZML to one TD proxy and one node: *unsealed* is the plain " +
      "stream at tier 3 (the TD proxy passes it through), *sealed* the same body in a tier-4 " +
      "session, sealed and opened on the client (counted in its times). TTFT: request " +
      "(sealing included) → first event readable in clear. Added = sealed − unsealed, median " +
      `over ${rows[0]!.rounds} interleaved round pairs.`,
    "",
    table(
      [
        "scenario",
        "unsealed TTFT p50",
        "sealed TTFT p50",
        "added TTFT p50",
        "unsealed TTFT p99",
        "sealed TTFT p99",
        "added TTFT p99",
        "unsealed streams/s",
        "sealed streams/s",
        "streams/s ×",
        "reads/stream unsealed",
        "reads/stream sealed",
        "failed",
      ],
      rows.map((s) => [
        s.title,
        ms(s.direct.ttftP50Ms),
        ms(s.gateway.ttftP50Ms),
        signed(s.addedMs.ttftP50),
        ms(s.direct.ttftP99Ms),
        ms(s.gateway.ttftP99Ms),
        signed(s.addedMs.ttftP99),
        num(s.direct.rps, 0),
        num(s.gateway.rps, 0),
        ratio(s.ratio.rps),
        num(s.direct.readsPerStream, 1),
        num(s.gateway.readsPerStream, 1),
        String(s.failed),
      ]),
    ),
    "",
    "Goals for sealing (reported, never failing the run):",
    "",
    targetTable(summary.sealingGoals),
    "",
    "CPU per stream (µs, median over rounds; on-CPU time from /proc; load = the client, " +
      "sealing and opening included):",
    "",
    table(["scenario, side", ...names, "total"], cpu),
    "",
  ];
}

function signedNum(value: number): string {
  if (!Number.isFinite(value)) return "–";
  return `${value > 0 ? "+" : ""}${value.toFixed(0)}`;
}

/** Allocation per gateway request, for the scenarios measured with `--alloc`. */
function allocSection(scenarios: ScenarioSummary[]): string[] {
  const measured = scenarios.filter((s) => s.allocKiBPerRequest !== undefined);
  if (measured.length === 0) return [];
  const names = Object.keys(measured[0]!.allocKiBPerRequest!);
  return [
    "## Allocated per request through ZML (KiB, V8 sampling heap profiler, `--alloc`)",
    "",
    table(
      ["scenario", ...names],
      measured.map((s) => [s.key, ...names.map((k) => num(s.allocKiBPerRequest![k], 1))]),
    ),
    "",
  ];
}

function memoryTable(summary: BenchSummary): string {
  const settled = summary.settledMemory;
  const idle = `RSS MiB after ${(summary.settleMs / 1000).toFixed(0)} s idle`;
  return table(
    [
      "process",
      "RSS MiB",
      "peak RSS MiB",
      "V8 heap used MiB",
      "external MiB",
      ...(settled ? [idle, "heap used MiB idle"] : []),
    ],
    Object.entries(summary.memory).map(([name, m]) => [
      name,
      num(m.rssMiB, 1),
      num(m.peakRssMiB, 1),
      num(m.heapUsedMiB, 1),
      num(m.externalMiB, 1),
      ...(settled ? [num(settled[name]?.rssMiB, 1), num(settled[name]?.heapUsedMiB, 1)] : []),
    ]),
  );
}

function featureSection(summary: BenchSummary): string[] {
  if (summary.features.length === 0) return [];
  const base = summary.features.find((f) => f.key === "default");
  const cpu = (f: FeatureRow) =>
    (f.summary.cpuUsPerRequest.gateway.intake ?? 0) +
    (f.summary.cpuUsPerRequest.gateway.dispatcher ?? 0);
  return [
    `## Optional features (${summary.features[0]!.summary.title}, each on a fresh stack)`,
    "",
    table(
      [
        "variant",
        "ZML req/s",
        "req/s ×",
        "added p50",
        "added p99",
        "intake µs/req",
        "dispatcher µs/req",
        "intake+dispatcher vs default",
        "OTLP exports",
        "scrapes",
        "failed",
      ],
      summary.features.map((f) => [
        f.title,
        num(f.summary.gateway.rps, 0),
        ratio(f.summary.ratio.rps),
        signed(f.summary.addedMs.p50),
        signed(f.summary.addedMs.p99),
        num(f.summary.cpuUsPerRequest.gateway.intake, 0),
        num(f.summary.cpuUsPerRequest.gateway.dispatcher, 0),
        base ? `${cpu(f) >= cpu(base) ? "+" : ""}${(cpu(f) - cpu(base)).toFixed(0)} µs` : "–",
        String(f.exports),
        String(f.scrapes),
        String(f.summary.failed),
      ]),
    ),
    "",
  ];
}

export function renderReport(summary: BenchSummary, command: string): string {
  const { machine, settings } = summary;
  // The tier-4 rows compare two ways through ZML, not ZML with direct: their own section.
  const compared = summary.scenarios.filter((s) => !s.sealing);
  const plain = compared.filter((s) => !s.stream);
  const streams = compared.filter((s) => s.stream);
  const out: string[] = [
    "# ZML gateway benchmark",
    "",
    `- date: ${summary.date}`,
    `- machine: ${machine.cpus} CPUs (${machine.cpuModel}), ${machine.platform}, Node ${machine.node}`,
    `- load average (1, 5, 15 min): ${machine.loadAverage.start.map((l) => l.toFixed(2)).join(", ")} ` +
      `at the start, ${machine.loadAverage.end.map((l) => l.toFixed(2)).join(", ")} at the end`,
    `- command: \`${command}\``,
    `- ${settings.rounds} rounds of each side per scenario (direct, floor and ZML in turn, the order ` +
      `rotated each round), ${settings.durationMs} ms each, after a ${settings.warmupMs} ms warm-up ` +
      `per side, and ${settings.stackWarmupMs} ms per side of c16 (and of fleet256's streams, when ` +
      `the run has fleet rows) before the first row; medians ` +
      `over rounds; ratios and added times are medians over rounds of the round-by-round ` +
      `comparison. Latencies in ms.`,
    `- total time: ${summary.elapsedS.toFixed(0)} s`,
    "",
  ];
  if (plain.length > 0)
    out.push("## Latency and throughput, direct vs through ZML", "", latencyTable(plain), "");
  if (streams.length > 0) out.push("## Streaming", "", streamTable(streams), "");
  out.push(...fleetSection(compared, summary.fleetGoals));
  const floored = compared.filter((s) => s.vsFloor !== undefined);
  if (floored.length > 0) {
    out.push(
      "## Against the floor: ZML's own secured shape, lean",
      "",
      "The floor is a bare node:http intake → the same TLS, nkey-authenticated bus → a " +
        "queue subscriber that calls the node with undici → the answer back as bus messages, " +
        "measured in the same rounds. It has no auth, validation, routing, tracing, metrics " +
        "or fail-over: what ZML adds over it is what those cost. Ratios and added times are " +
        "medians over rounds, ZML against the floor's round beside it.",
      "",
      floorTable(floored),
      "",
      "Goals against the floor (reported, never failing the run):",
      "",
      targetTable(summary.floorGoals),
      "",
    );
  }
  out.push(...sealingSection(summary));
  out.push("## Routing decision alone (libs/routing, one decision, in-process)", "");
  if (summary.routing.available) {
    out.push(
      table(
        ["nodes", "variant", "p50 µs", "p99 µs", "fleet, runs (as printed)"],
        summary.routing.rows.map((r) => [
          String(r.nodes),
          r.variant,
          num(r.p50Us, 2),
          num(r.p99Us, 2),
          r.detail,
        ]),
      ),
    );
  } else {
    out.push(`not available: ${summary.routing.reason}`);
  }
  out.push(
    "",
    "## Memory of each service after the run",
    "",
    memoryTable(summary),
    "",
    ...featureSection(summary),
    "## Batch jobs (JetStream → batch workers → instant node → results stream)",
    "",
    summary.batch
      ? `${summary.batch.jobs} jobs in ${num(summary.batch.seconds, 2)} s: ` +
          `**${num(summary.batch.jobsPerSecond, 0)} jobs/s**, ${summary.batch.failed} not done.`
      : "skipped",
    "",
    "## CPU time per request (µs, median over rounds; on-CPU time from /proc)",
    "",
    cpuTable(compared),
    "",
    ...allocSection(summary.scenarios),
    "## Targets (2 cores)",
    "",
    targetTable(summary.targets),
    "",
    "## Requests",
    "",
    `${summary.requests.completed} completed, ${summary.requests.failed} failed.`,
  );
  for (const s of summary.scenarios) {
    if (s.failed > 0) out.push(`- ${s.key}: ${s.failed} failed, e.g. ${s.failures.join("; ")}`);
  }
  return `${out.join("\n")}\n`;
}
