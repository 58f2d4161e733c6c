// The Grafana dashboard must keep matching the metrics the services export: a renamed metric
// would leave a panel silently empty, so every name a query uses is looked up in the sources.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";
import { createMetrics } from "@zml/telemetry";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";

const root = repoRoot();

interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Array<{ refId: string; expr: string; datasource?: { uid: string } }>;
}
interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  templating: { list: Array<{ name: string; type: string; query: unknown }> };
  panels: Panel[];
}

const dashboard = JSON.parse(
  readFileSync(join(root, "deploy/grafana/zml-dashboard.json"), "utf8"),
) as Dashboard;
const queryPanels = dashboard.panels.filter((p) => p.type !== "row");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => join(e.parentPath, e.name));
}

/** Every `zml_…` metric name spelled in service and library sources, plus Node's defaults. */
function exportedMetricNames(): Set<string> {
  const names = new Set<string>();
  for (const base of ["services", "libs"]) {
    for (const pkg of readdirSync(join(root, base))) {
      let files: string[];
      try {
        files = sourceFiles(join(root, base, pkg, "src"));
      } catch {
        continue;
      }
      for (const file of files) {
        for (const m of readFileSync(file, "utf8").matchAll(/["'](zml_[a-z0-9_]+)["']/g)) {
          names.add(m[1]!);
        }
      }
    }
  }
  // Every service registers prom-client's process and Node.js metrics through createMetrics.
  for (const metric of createMetrics({ service: "test" }).registry.getMetricsAsArray()) {
    names.add(metric.name);
  }
  return names;
}

describe("deploy/grafana/zml-dashboard.json", () => {
  it("is a dashboard model with a Prometheus data source variable used by every panel", () => {
    expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/);
    expect(dashboard.title).not.toBe("");
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const variable = dashboard.templating.list.find((v) => v.name === "datasource");
    expect(variable).toMatchObject({ type: "datasource", query: "prometheus" });
    expect(queryPanels.length).toBeGreaterThan(10);
    for (const panel of queryPanels) {
      expect(panel.datasource, panel.title).toEqual({ type: "prometheus", uid: "${datasource}" });
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const t of panel.targets ?? []) {
        expect(t.datasource?.uid ?? "${datasource}", panel.title).toBe("${datasource}");
        expect(t.expr.trim(), panel.title).not.toBe("");
      }
    }
  });

  it("lays panels out on the 24-column grid without overlaps, with unique ids", () => {
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const cells = new Map<string, string>();
    for (const p of dashboard.panels) {
      const { x, y, w, h } = p.gridPos;
      expect(x + w, p.title).toBeLessThanOrEqual(24);
      expect(Math.min(x, y, w - 1, h - 1), p.title).toBeGreaterThanOrEqual(0);
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          const other = cells.get(`${i},${j}`);
          expect(other, `${p.title} overlaps ${other}`).toBeUndefined();
          cells.set(`${i},${j}`, p.title);
        }
      }
    }
  });

  it("queries only metrics the services export", () => {
    const exported = exportedMetricNames();
    const used = new Set<string>();
    for (const panel of queryPanels) {
      for (const t of panel.targets ?? []) {
        for (const m of t.expr.matchAll(/\b((?:zml|nodejs|process)_[a-z0-9_]+)\b/g)) {
          used.add(m[1]!);
        }
      }
    }
    for (const name of used) {
      const base = name.replace(/_(bucket|sum|count)$/, "");
      expect(exported.has(name) || exported.has(base), `${name} is exported`).toBe(true);
    }
    for (const metric of [
      "zml_intake_requests_total",
      "zml_intake_request_duration_seconds_bucket",
      "zml_dispatcher_decisions_total",
      "zml_dispatcher_retries_total",
      "zml_dispatcher_cooldowns_total",
      "zml_dispatcher_saturation_total",
      "zml_node_state",
      "zml_node_queue_depth",
      "zml_node_health_score",
      "zml_attestation_attestations_total",
      "zml_batch_queue_depth",
      "zml_batch_jobs_total",
    ]) {
      expect(used, metric).toContain(metric);
    }
  });

  it("is provisioned in the compose stack with the Prometheus data source", () => {
    const provider = parseYaml(
      readFileSync(join(root, "deploy/grafana/provisioning/dashboards/zml.yml"), "utf8"),
    ) as { providers: Array<{ type: string; options: { path: string } }> };
    const compose = readFileSync(join(root, "deploy/compose/docker-compose.yml"), "utf8");
    expect(compose).toContain(
      `../grafana/zml-dashboard.json:${provider.providers[0]!.options.path}/zml-dashboard.json:ro`,
    );
    const sources = parseYaml(
      readFileSync(join(root, "deploy/grafana/provisioning/datasources/prometheus.yml"), "utf8"),
    ) as { datasources: Array<{ type: string; url: string }> };
    expect(sources.datasources).toEqual([
      expect.objectContaining({ type: "prometheus", url: "http://prometheus:9090" }),
    ]);
  });
});
