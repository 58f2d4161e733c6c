// The alerting rules of docs/sre-guide.md as Prometheus loads them: promtool (Debian's
// `prometheus` package, installed by deploy/dev/bootstrap.sh) checks the rules, runs their
// unit tests, and checks the compose stack's Prometheus configuration with the rules
// mounted where the container has them.
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { repoRoot } from "@zml/harness";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";

const root = repoRoot();
const rulesDir = join(root, "deploy/prometheus");
const composeDir = join(root, "deploy/compose");
const rules = parseYaml(readFileSync(join(rulesDir, "alerts.yml"), "utf8")) as {
  groups: Array<{ rules: Array<{ alert: string; expr: string }> }>;
};
const alerts = rules.groups.flatMap((g) => g.rules);
const scratch = mkdtempSync(join(tmpdir(), "zml-prometheus-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function promtool(args: string[], cwd: string) {
  const run = spawnSync("promtool", args, { cwd, encoding: "utf8", timeout: 60_000 });
  if (run.error) throw new Error(`promtool: ${run.error.message} (run deploy/dev/bootstrap.sh)`);
  return { status: run.status, output: run.stdout + run.stderr };
}

describe("deploy/prometheus/alerts.yml", () => {
  it("passes promtool check rules", () => {
    const run = promtool(["check", "rules", "alerts.yml"], rulesDir);
    expect(run.output).toContain(`SUCCESS: ${alerts.length} rules found`);
    expect(run.status).toBe(0);
  });

  it("fires each alert on the series it watches and stays quiet when healthy (promtool test rules)", () => {
    const run = promtool(["test", "rules", "alerts.test.yml"], rulesDir);
    expect(run.output, run.output).toContain("SUCCESS");
    expect(run.status).toBe(0);
    const tests = readFileSync(join(rulesDir, "alerts.test.yml"), "utf8");
    for (const { alert } of alerts) expect(tests, alert).toContain(`alertname: ${alert}`);
  });

  it("are the alerts the SRE guide describes", () => {
    const guide = readFileSync(join(root, "docs/sre-guide.md"), "utf8");
    const named = [...guide.matchAll(/`(Zml[A-Za-z0-9]+)`/g)].map((m) => m[1]);
    expect(new Set(named)).toEqual(new Set(alerts.map((a) => a.alert)));
  });

  it("are loaded by the compose stack's Prometheus (promtool check config)", () => {
    const compose = parseYaml(readFileSync(join(composeDir, "docker-compose.yml"), "utf8")) as {
      services: { prometheus: { volumes: string[] } };
    };
    // Lay out /etc/prometheus as the container sees it, from the compose mounts.
    for (const volume of compose.services.prometheus.volumes) {
      const [source, target] = volume.split(":") as [string, string];
      expect(target.startsWith("/etc/prometheus/"), target).toBe(true);
      copyFileSync(resolve(composeDir, source), join(scratch, basename(target)));
    }
    const run = promtool(["check", "config", "prometheus.yml"], scratch);
    expect(run.output).toContain(`SUCCESS: ${alerts.length} rules found`);
    expect(run.status).toBe(0);
  });
});
