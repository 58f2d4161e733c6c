// `npm run bench`, as the README names it, in its smallest form: the stack, the floor beside
// it, the report and the regression check against the last run of the same build.
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildIdOf } from "../bench/build.ts";
import type { BenchSummary } from "../bench/summary.ts";
import { runCommand } from "../support/run-command.ts";

const bench = (args: string[]) =>
  runCommand("npm", ["run", "bench", "--", ...args], { cwd: repoRoot() });

describe("npm run bench", () => {
  let out: string;
  let run: Awaited<ReturnType<typeof bench>>;
  let summary: BenchSummary;

  beforeAll(async () => {
    out = await mkdtemp(join(tmpdir(), "zml-bench-"));
    // A previous run of this same build whose ZML ran at 100× the floor: any real run has
    // fallen far more than 15 % against it.
    const previous = {
      date: "2026-01-01T00:00:00.000Z",
      build: buildIdOf(repoRoot()),
      scenarios: [
        { key: "sequential", title: "sequential", vsFloor: { rps: 100 } },
        { key: "stream1", title: "stream1", vsFloor: { rps: 100 } },
      ],
    };
    await writeFile(join(out, "latest.json"), JSON.stringify(previous));
    run = await bench([
      ...["--quick", "--rounds", "1", "--duration-ms", "300", "--warmup-ms", "100"],
      ...["--stack-warmup-ms", "300"],
      ...["--only", "sequential,stream1", "--skip-routing", "--skip-batch", "--settle-ms", "0"],
      ...["--out", out],
    ]);
    summary = JSON.parse(await readFile(join(out, "latest.json"), "utf8")) as BenchSummary;
  }, 180_000);

  afterAll(async () => {
    if (out) await rm(out, { recursive: true, force: true });
  });

  it("measures ZML against the floor in the same rounds, every request answered", () => {
    expect(summary.requests.failed, run.stderr).toBe(0);
    for (const key of ["sequential", "stream1"]) {
      const row = summary.scenarios.find((s) => s.key === key)!;
      expect(row.floor?.rps, key).toBeGreaterThan(0);
      expect(row.gateway.rps, key).toBeGreaterThan(0);
      expect(row.vsFloor?.rps, key).toBeCloseTo(
        row.gateway.rps / row.floor!.rps,
        // One round: the median over pairs is that pair's own ratio.
        6,
      );
      // The floor's processes did the work of its rounds.
      expect(row.cpuUsPerRequest.floor?.["floor-worker"], key).toBeGreaterThan(0);
    }
    expect(run.stdout).toContain("## Against the floor: ZML's own secured shape, lean");
    expect(run.stdout).toMatch(/\| sequential p50, ms ZML adds over the floor +\| +-?\d/);
  });

  it("fails loudly, exit 3, when a row fell more than 15 % since the last run of this build", async () => {
    expect(run.code).toBe(3);
    expect(run.stderr).toContain("!! 2 row(s) fell more than 15 % against the floor");
    expect(run.stderr).toMatch(/REGRESSED sequential +ZML ÷ floor 100\.00× → /);
    expect(JSON.parse(await readFile(join(out, "previous.json"), "utf8"))).toMatchObject({
      date: "2026-01-01T00:00:00.000Z",
    });
  });
});
