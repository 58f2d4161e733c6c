// docs/sre-guide.md tells SREs which span, attribute and metric names to search for; this
// keeps it true when the code renames one.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "@zml/harness";
import { describe, expect, it } from "vitest";

const root = repoRoot();
const guide = readFileSync(join(root, "docs/sre-guide.md"), "utf8");
const alertRules = readFileSync(join(root, "deploy/prometheus/alerts.yml"), "utf8");

/** Every TypeScript source of the services and libraries, concatenated. */
function sources(): string {
  const texts: string[] = [];
  for (const base of ["services", "libs"]) {
    for (const pkg of readdirSync(join(root, base))) {
      const dir = join(root, base, pkg, "src");
      let entries;
      try {
        entries = readdirSync(dir, { recursive: true, withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) {
        if (e.isFile() && e.name.endsWith(".ts")) {
          texts.push(readFileSync(join(e.parentPath, e.name), "utf8"));
        }
      }
    }
  }
  return texts.join("\n");
}

describe("docs/sre-guide.md", () => {
  const code = sources();

  it("names only span names and attributes the services set", () => {
    const names = new Set(
      [...guide.matchAll(/\b(zml\.[a-z_]+(?:\.[a-z_]+)*)\b/g)].map((m) => m[1]!),
    );
    for (const required of ["zml.decision_id", "zml.decision", "zml.attempt.kind"]) {
      expect(names).toContain(required);
    }
    for (const name of names) expect(code, name).toContain(`"${name}`);
  });

  it("names only metrics the services export, and so do the alerting rules", () => {
    const metrics = new Set(
      [...`${guide}\n${alertRules}`.matchAll(/\b(zml_[a-z0-9_]+)\b/g)].map((m) => m[1]!),
    );
    expect(metrics.size).toBeGreaterThan(10);
    for (const name of metrics) {
      const base = name.replace(/_(bucket|sum|count)$/, "");
      expect(code.includes(`"${name}"`) || code.includes(`"${base}"`), name).toBe(true);
    }
  });

  it("searches by the services' own names", () => {
    // Each service boots under its name, and tracing names it `zml-<name>` (libs/runtime).
    expect(code).toContain("serviceName: `zml-${name}`");
    for (const service of ["dispatcher", "intake"]) {
      expect(code).toContain(`bootService("${service}"`);
    }
    expect(guide).toContain("Service   | `zml-dispatcher`");
    expect(guide).toContain("`zml.decision_id=");
  });
});
