// `npm run bench:routing-quality` in its smallest form: 8 caching simulated nodes, the ZML stack,
// and the random, tenant-hash and ZML sides over one workload, from cold caches each (1 s of
// warm-up, 3 s measured). Checks
// the bench runs end to end and that its figures come from the nodes' own counters; it asserts
// no speed.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { QualitySummary } from "../bench/quality/report.ts";
import { generateRequests, workloads } from "../bench/quality/workloads.ts";
import { runCommand } from "../support/run-command.ts";

describe("npm run bench:routing-quality --size smallest", () => {
  let out: string;
  let run: Awaited<ReturnType<typeof runCommand>>;
  let summary: QualitySummary;

  beforeAll(async () => {
    out = await mkdtemp(join(tmpdir(), "zml-routing-quality-"));
    run = await runCommand(
      "npm",
      ["run", "bench:routing-quality", "--", "--size", "smallest", "--out", out],
      { cwd: repoRoot() },
    );
    summary = JSON.parse(
      await readFile(join(out, "routing-quality.json"), "utf8"),
    ) as QualitySummary;
  }, 240_000);

  afterAll(async () => {
    if (out) await rm(out, { recursive: true, force: true });
  });

  it("runs every side of the smallest form, every request answered", () => {
    expect(run.code, run.stderr).toBe(0);
    expect(summary.rows.map((r) => r.side)).toEqual(["random", "tenant-hash", "zml"]);
    for (const row of summary.rows) {
      expect(row.sent, row.side).toBeGreaterThan(30);
      expect(row.failed, `${row.side}: ${row.failures.join("; ")}`).toBe(0);
      expect(row.completed, row.side).toBe(row.sent);
      expect(Number.isFinite(row.ttftMs.p99), row.side).toBe(true);
      expect(row.outputTokensPerS, row.side).toBeGreaterThan(0);
    }
    expect(run.stdout).toContain("## shared system prompts, 64 tenants uniform");
    expect(run.stdout).toMatch(/\| tenant → node by hash \(direct\) +\| +\d/);
  });

  it("takes hit rates and prefill from the nodes' counters, cold for every side", () => {
    const side = (key: string) => summary.rows.find((r) => r.side === key)!;
    for (const row of summary.rows) {
      expect(row.hitRate, row.side).toBeGreaterThanOrEqual(0);
      expect(row.hitRate, row.side).toBeLessThan(1);
      // A 2,000-token system prompt and a 40-token turn, in roles: about 2,060 tokens a
      // request, of which a cold cache's first request per tenant prefills all.
      expect(row.prefillTokensPerRequest, row.side).toBeGreaterThan(0);
      expect(row.prefillTokensPerRequest, row.side).toBeLessThanOrEqual(2_080);
    }
    // The same arrivals and tenants on each side: a tenant's repeat hits only on the node
    // that served it before, which tenant-hash always picks and random rarely does.
    expect(side("tenant-hash").hitRate).toBeGreaterThan(side("random").hitRate);
    // Each tenant first seen in the measured window had its system prompt (2,000 tokens)
    // prefilled at least once within it, whatever the routing: the nodes counted that much.
    // Reading 8 nodes' counters at the window's start takes a moment, in which a first request
    // may already be counted before the edge: only tenants first seen 0.5 s in are certain.
    const { seed, warmupS, durationS, rateScale } = summary.settings;
    const workload = workloads()["shared-uniform"];
    const rate = workload.ratePerS * rateScale;
    const requests = generateRequests(workload, seed, warmupS + durationS, rate);
    const edgeMs = warmupS * 1000;
    const seenBy = (ms: number) =>
      new Set(requests.filter((r) => r.atMs < ms).map((r) => r.affinityKey));
    const warm = seenBy(edgeMs + 500);
    const measured = requests.filter((r) => r.atMs >= edgeMs);
    const fresh = new Set(measured.map((r) => r.affinityKey).filter((k) => !warm.has(k))).size;
    expect(fresh).toBeGreaterThan(0);
    for (const row of summary.rows) {
      expect(row.sent, row.side).toBe(measured.length);
      expect(row.prefillTokensPerRequest * row.completed, row.side).toBeGreaterThanOrEqual(
        fresh * 2_000,
      );
    }
  });
});
